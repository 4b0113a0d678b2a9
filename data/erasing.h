// RandomErasing on uint8 HWC images (Zhong et al. 2017, torchvision's transforms.RandomErasing):
// with probability p, a rectangle of area s * H * W (s ~ U[scale]) and aspect ratio r
// (log r ~ U[log ratio]), h = round(sqrt(s H W r)), w = round(sqrt(s H W / r)), is tried up to 10
// times until it fits (h < H and w < W); its top-left corner is uniform. The rectangle is filled
// with the byte `value` or, for "random", with uniformly random bytes.
// NOTE: torchvision erases the normalised float tensor (value 0 = the channel mean after
// normalisation, "random" = N(0, 1) values); kiln erases the bytes before normalisation, so
// value 0 is black and "random" is uniform noise over 0..255 (docs/augment.md).
// Tests: tests/data/auto_augment_test.cpp.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "data/transform.h"

namespace kiln {

struct RandomErasingOptions {
  /// probability of erasing a rectangle, 0..1 (default 0.5)
  double p = 0.5;
  /// range of the erased share of the area [lo, hi], 0 < lo <= hi <= 1 (default [0.02, 0.33])
  std::array<double, 2> scale = {0.02, 0.33};
  /// range of the aspect ratio h / w [lo, hi], 0 < lo <= hi (default [0.3, 3.3])
  std::array<double, 2> ratio = {0.3, 3.3};
  /// the fill: a byte 0..255, or "random" (uniform random bytes) (default 0)
  int64_t value = 0;
  bool random = false;  // JSON: "value": "random"

  static RandomErasingOptions from_json(const Json& j, const std::string& path = "random_erasing");
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(RandomErasingOptions)

class RandomErasing : public Transform {
 public:
  explicit RandomErasing(RandomErasingOptions o);
  // The rectangle to erase, or h = w = 0 when the coin says no or no try fits.
  CropBox choose(ImageShape in, SampleRng& rng) const;

  std::string type() const override { return "random_erasing"; }
  Json to_json() const override;
  ImageShape output_shape(ImageShape in) const override { return in; }
  void apply(Image& img, SampleRng& rng, Image& scratch) const override;
  const RandomErasingOptions& options() const { return o_; }

 private:
  RandomErasingOptions o_;
};

}  // namespace kiln
