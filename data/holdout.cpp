// Held-out validation splits (see holdout.h).
#include "data/holdout.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "data/transform.h"

namespace kiln {

std::vector<int64_t> holdout_indices(int64_t size, int64_t holdout, uint64_t seed, Split part) {
  KILN_CHECK(holdout > 0 && holdout < size, "holdout: ", holdout, " images cannot be held out of ", size,
             "; accepted: 1 to ", size - 1);
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  SampleRng rng(mix64(seed ^ 0x686f6c646f7574ull));  // "holdout"
  for (int64_t i = size - 1; i > 0; --i) std::swap(order[i], order[rng.uniform_int(i + 1)]);
  std::vector<int64_t> out = part == Split::val ? std::vector<int64_t>(order.begin(), order.begin() + holdout)
                                                : std::vector<int64_t>(order.begin() + holdout, order.end());
  std::sort(out.begin(), out.end());
  return out;
}

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices, std::string name)
    : base_(std::move(base)), indices_(std::move(indices)), name_(std::move(name)) {
  for (int64_t i : indices_)
    KILN_CHECK(i >= 0 && i < base_->size(), name_, ": index ", i, " out of range [0, ", base_->size(), ")");
}

int64_t SubsetDataset::base_index(int64_t index) const {
  check_index(index);
  return indices_[static_cast<size_t>(index)];
}

void SubsetDataset::get_into(int64_t index, Sample& out) const { base_->get_into(base_index(index), out); }

bool SubsetDataset::get_region_into(int64_t index, const ChooseBox& choose, Sample& out, CropBox& box) const {
  return base_->get_region_into(base_index(index), choose, out, box);
}

}  // namespace kiln
