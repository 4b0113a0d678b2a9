// IdxDataset: MNIST-format (IDX) image and label files, e.g. MNIST and Fashion-MNIST. Files may be
// plain or gzip (read directly with zlib). Images: magic 0x00000803 (unsigned bytes, 3 dims:
// count, rows, cols) or 0x00000804 (4 dims, last = channels); labels: 0x00000801 (1 dim). Both files
// are read whole at construction (47 MB for MNIST's training images); get_into() then copies one
// image out, so concurrent calls are safe. A .gz file inflates no further than its header declares.
// Tests: tests/data/sources_test.cpp, tests/data/hardened_input_test.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace kiln {

class IdxDataset : public Dataset {
 public:
  // Throws kiln::Error naming the file for a missing or damaged file (magic number, dimensions,
  // truncated or oversized data), image and label counts that differ, or a label outside
  // [0, num_classes). `name` prefixes messages ("fashion_mnist train").
  IdxDataset(const std::string& images_file, const std::string& labels_file, int64_t num_classes = 10,
             std::string name = "idx");

  // The standard file names under `root`: {train,t10k}-{images-idx3,labels-idx1}-ubyte, with or
  // without .gz. `name` is "mnist" or "fashion_mnist" (used in messages, and fashion_mnist's
  // class names are Zalando's "T-shirt/top" .. "Ankle boot").
  static std::shared_ptr<IdxDataset> open(const std::string& root, Split split, const std::string& name = "mnist");

  int64_t size() const override { return count_; }
  int64_t num_classes() const override { return num_classes_; }
  ImageShape image_shape() const override { return shape_; }
  std::string name() const override { return name_; }
  void get_into(int64_t index, Sample& out) const override;
  // "0".."9" for MNIST, Fashion-MNIST's ten names when opened as "fashion_mnist".
  std::vector<std::string> class_names() const override;

  const std::string& images_file() const { return images_file_; }
  const std::string& labels_file() const { return labels_file_; }

 private:
  std::string images_file_, labels_file_, name_;
  std::vector<std::string> class_names_;  // empty: numbers
  int64_t num_classes_ = 0, count_ = 0;
  ImageShape shape_;
  std::vector<uint8_t> pixels_;  // the images file, header stripped: count x h x w x c
  std::vector<uint8_t> labels_;  // one byte per image
};

// Fashion-MNIST's class names by label (Zalando's README): "T-shirt/top", "Trouser", ..., "Ankle boot".
const std::vector<std::string>& fashion_mnist_class_names();

}  // namespace kiln
