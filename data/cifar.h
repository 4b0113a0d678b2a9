// CifarDataset: the binary versions of CIFAR-10 and CIFAR-100. Records are fixed-size:
//   CIFAR-10:  1 label byte,                        3072 pixel bytes
//   CIFAR-100: 1 coarse label byte, 1 fine label byte, 3072 pixel bytes (the fine label is used)
// with the pixels planar (1024 red, 1024 green, 1024 blue, rows of 32). They are converted once
// at load to interleaved HWC (32x32x3) so get_into() is a plain copy. Files:
//   CIFAR-10:  data_batch_1.bin .. data_batch_5.bin (train), test_batch.bin (val)
//   CIFAR-100: train.bin (train), test.bin (val)
// found under `root` or under the folder the archive unpacks to (cifar-10-batches-bin,
// cifar-100-binary). Class names: from the archive's meta file next to the data files
// (batches.meta.txt for CIFAR-10, fine_label_names.txt for CIFAR-100: one name a line) when it
// holds exactly 10 or 100 names, else the known lists (cifar_class_names()).
// Tests: tests/data/sources_test.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace kiln {

enum class CifarKind { cifar10, cifar100 };

class CifarDataset : public Dataset {
 public:
  // Reads every file whole, in order. Throws kiln::Error naming the file when it is missing, its
  // size is not a whole number of records, or a label is out of range.
  CifarDataset(CifarKind kind, const std::vector<std::string>& files, std::string name);

  static std::shared_ptr<CifarDataset> open(CifarKind kind, const std::string& root, Split split);

  int64_t size() const override { return count_; }
  int64_t num_classes() const override { return kind_ == CifarKind::cifar10 ? 10 : 100; }
  ImageShape image_shape() const override { return {32, 32, 3}; }
  std::string name() const override { return name_; }
  void get_into(int64_t index, Sample& out) const override;
  std::vector<std::string> class_names() const override { return class_names_; }

 private:
  CifarKind kind_;
  std::string name_;
  std::vector<std::string> class_names_;
  int64_t count_ = 0;
  std::vector<uint8_t> pixels_;  // count x 32 x 32 x 3
  std::vector<uint8_t> labels_;
};

// The known class names: CIFAR-10's "airplane" .. "truck", CIFAR-100's fine labels "apple" ..
// "worm" (in label order, as the archives' meta files list them).
const std::vector<std::string>& cifar_class_names(CifarKind kind);
// The names in the meta file `folder`/batches.meta.txt (CIFAR-10) or fine_label_names.txt
// (CIFAR-100), one a line, blank lines skipped; the known list when the file is missing or does not
// hold exactly 10 or 100 names.
std::vector<std::string> read_cifar_class_names(CifarKind kind, const std::string& folder);

}  // namespace kiln
