// A held-out validation split carved from the training files (`"data": {"holdout": N}`): tune a recipe
// on images the final test set never saw. A fixed, seeded permutation of the training set's indices
// (Fisher-Yates on SampleRng(holdout_seed), so the same on every machine and thread count) is cut in
// two: its first N indices are the validation split, the rest (in increasing index order) the
// training split. The source's own validation files are then not read. Both parts keep the source's
// classes and names ("fashion_mnist train (/root) [holdout: 50000 of 60000]").
// Tests: tests/data/holdout_test.cpp.
#pragma once
#include <memory>
#include <vector>

#include "data/dataset.h"

namespace kiln {

// The indices of `size` training samples that form the held-out validation split (Split::val) or the
// remaining training split (Split::train), both sorted. Requires 0 < holdout < size.
std::vector<int64_t> holdout_indices(int64_t size, int64_t holdout, uint64_t seed, Split part);

// A view of some samples of another dataset, renumbered 0..indices.size()-1.
class SubsetDataset : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices, std::string name);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  int64_t num_classes() const override { return base_->num_classes(); }
  ImageShape image_shape() const override { return base_->image_shape(); }
  std::string name() const override { return name_; }
  void get_into(int64_t index, Sample& out) const override;
  std::vector<std::string> class_names() const override { return base_->class_names(); }
  bool get_region_into(int64_t index, const ChooseBox& choose, Sample& out, CropBox& box) const override;
  // The base dataset's index of sample `index`.
  int64_t base_index(int64_t index) const;

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
  std::string name_;
};

}  // namespace kiln
