// ColorJitter on uint8 HWC images, PIL's ImageEnhance arithmetic (what torchvision runs on the PIL
// images of ImageFolder). Each enabled adjustment draws a factor f ~ U[max(0, 1 - x), 1 + x] and
// blends the image with a "degenerate" image d:  out = clamp(d + f * (in - d), 0, 255), truncated
// toward zero as PIL's Image.blend does.
//   brightness  d = 0
//   contrast    d = the mean grey level of the image, rounded (grey = (299 R + 587 G + 114 B) / 1000,
//               PIL's "L" conversion, rounded; a one-channel image is its own grey)
//   saturation  d = the pixel's own grey level in every channel (no-op on one-channel images)
// NOTE: torchvision applies the adjustments in a random order per image; kiln uses the fixed order
// brightness, contrast, saturation (the factors are drawn in that order, all three always, so
// turning one on leaves the others' draws unchanged). Hue is not supported.
// Tests: tests/data/resize_test.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "data/transform.h"

namespace kiln {

struct ColorJitterOptions {
  /// brightness factor spread x: f ~ U[max(0, 1 - x), 1 + x]; 0 = off (default 0)
  double brightness = 0.0;
  /// contrast factor spread, as brightness; 0 = off (default 0)
  double contrast = 0.0;
  /// saturation factor spread, as brightness; 0 = off (default 0)
  double saturation = 0.0;

  static ColorJitterOptions from_json(const Json& j, const std::string& path = "color_jitter");
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(ColorJitterOptions)

class ColorJitter : public Transform {
 public:
  explicit ColorJitter(ColorJitterOptions o);
  // The three adjustments with given factors (1 = unchanged), in place.
  static void adjust(Image& img, double brightness, double contrast, double saturation);

  std::string type() const override { return "color_jitter"; }
  Json to_json() const override;
  ImageShape output_shape(ImageShape in) const override { return in; }
  void apply(Image& img, SampleRng& rng, Image& scratch) const override;
  int64_t min_input_side(int64_t need) const override { return need; }
  const ColorJitterOptions& options() const { return o_; }

 private:
  ColorJitterOptions o_;
};

}  // namespace kiln
