// Normalize: the last step of every pipeline, uint8 HWC -> float, written straight into the batch
// buffer (NHWC, f32 or bf16):   out[y, x, c] = (in[y, x, c] / 255 - mean[c]) / std[c]
// (torchvision's ToTensor + Normalize). A 256-entry table per channel, computed in double and
// rounded once, makes it one lookup per byte and bit-exact with the formula. A pipeline without a
// normalize step writes in / 255. Tests: tests/data/transforms_test.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "data/dataset.h"
#include "core/json_reader.h"

namespace kiln {

struct NormalizeOptions {
  /// mean per channel of pixels scaled to [0, 1]; a single value applies to every channel (default [0])
  std::vector<double> mean = {0.0};
  /// standard deviation per channel of pixels scaled to [0, 1], each non-zero; a single value
  /// applies to every channel (default [1])
  std::vector<double> std = {1.0};

  // "type" is accepted and ignored; mean and std must have the same length or one of them length 1.
  static NormalizeOptions from_json(const Json& j, const std::string& path = "normalize");
  Json to_json() const;  // without "type"
};
KILN_JSON_CONVERSIONS(NormalizeOptions)

class Normalize {
 public:
  explicit Normalize(NormalizeOptions o = {});
  // Number of channels the options are for: 1 (any image) or the length of mean/std.
  int64_t channels() const { return k_; }
  // Throws unless images with `c` channels can be normalised; `where` names the step in messages.
  void check_channels(int64_t c, const std::string& where) const;
  // The normalised value of byte v in channel ch.
  float value(uint8_t v, int64_t ch) const { return lut_[static_cast<size_t>((k_ == 1 ? 0 : ch) * 256 + v)]; }
  // Writes img.numel() values to `dst` as f32 or bf16 (dtype), in the image's HWC order.
  void write(const Image& img, void* dst, DType dtype) const;
  const NormalizeOptions& options() const { return o_; }

 private:
  NormalizeOptions o_;
  int64_t k_ = 1;
  std::vector<float> lut_;      // k_ x 256
  std::vector<uint16_t> lut16_;  // the same values rounded to bf16
};

}  // namespace kiln
