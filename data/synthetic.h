// SyntheticDataset: random images and labels of a given shape, for benchmarks and tests that must
// not depend on files. Every pixel and label is a pure function of (seed, index), so any two
// reads of a sample agree whatever the thread or order. Tests: tests/data/sources_test.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "data/dataset.h"
#include "core/json_reader.h"

namespace kiln {

struct SyntheticOptions {
  /// number of samples (default 1024)
  int64_t size = 1024;
  /// image height in pixels (default 32)
  int64_t height = 32;
  /// image width in pixels (default 32)
  int64_t width = 32;
  /// channels per pixel (default 3)
  int64_t channels = 3;
  /// number of classes; labels are uniform in [0, num_classes) (default 10)
  int64_t num_classes = 10;
  /// seed of the pixels and labels (default 0)
  uint64_t seed = 0;

  static SyntheticOptions from_json(const Json& j, const std::string& path = "synthetic");
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(SyntheticOptions)

class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(SyntheticOptions options, std::string name = "synthetic");

  int64_t size() const override { return o_.size; }
  int64_t num_classes() const override { return o_.num_classes; }
  ImageShape image_shape() const override { return {o_.height, o_.width, o_.channels}; }
  std::string name() const override { return name_; }
  void get_into(int64_t index, Sample& out) const override;
  const SyntheticOptions& options() const { return o_; }

 private:
  SyntheticOptions o_;
  std::string name_;
};

}  // namespace kiln
