// Automatic augmentation policies on uint8 HWC images with 1 (grey) or 3 (RGB) channels, as
// torchvision 0.14's transforms/autoaugment.py runs them on PIL images:
//   TrivialAugmentWide  one operation drawn uniformly from the 14 below, at a magnitude bin drawn
//                       uniformly from num_magnitude_bins, with the "wide" ranges
//   RandAugment         num_ops operations drawn uniformly (with repetition), each at the fixed bin
//                       `magnitude` of num_magnitude_bins, with RandAugment's ranges
// For a signed operation the magnitude is negated with probability 1/2.
// The operations (torchvision's names; ranges as "TrivialAugmentWide | RandAugment", linspace over
// the bins in float32 as torch.linspace; W, H the image's width and height):
//   Identity
//   ShearX, ShearY          signed, 0..0.99 | 0..0.3         shear about the top-left corner
//   TranslateX, TranslateY  signed, 0..32 | 0..150/331*W (H)  pixels, truncated to an integer
//   Rotate                  signed, 0..135 | 0..30 degrees  counter-clockwise about (W/2, H/2)
//   Brightness, Color, Contrast, Sharpness  signed, 0..0.99 | 0..0.9  PIL ImageEnhance, factor 1 + m
//   Posterize               8 - round(bin / ((bins-1)/6)) | 8 - round(bin / ((bins-1)/4)) bits kept
//   Solarize                255..0: invert the values >= the threshold
//   AutoContrast, Equalize  per channel, PIL ImageOps (no magnitude)
// The warps are PIL's nearest-neighbour affine transform (Image.transform with its 16.16
// fixed-point stepping; Image.rotate's matrix); outside the image they write `fill`. Colour
// operations reuse ColorJitter::adjust (data/color.h): Color on a grey image is the identity,
// as in PIL. Docs: docs/augment.md. Tests: tests/data/auto_augment_test.cpp (golden against
// torchvision, tests/fixtures/augment/).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/transform.h"

namespace kiln {

enum class AugmentOp {
  identity, shear_x, shear_y, translate_x, translate_y, rotate, brightness, color, contrast, sharpness,
  posterize, solarize, autocontrast, equalize
};
inline constexpr int kNumAugmentOps = 14;
// torchvision's name ("ShearX"); augment_op_from_name throws, listing the names, on an unknown one.
const char* augment_op_name(AugmentOp op);
AugmentOp augment_op_from_name(const std::string& name);

// Which augmentation space: the magnitude ranges of TrivialAugmentWide or of RandAugment.
enum class AugmentSpace { trivial_augment_wide, rand_augment };

// Whether the op's magnitude is negated with probability 1/2.
bool augment_op_signed(AugmentOp op);
// The magnitude of `op` at bin `bin` (0 <= bin < bins, bins >= 2) for an h x w image (only the
// RandAugment translations depend on the size), unsigned; 0 for the ops without a magnitude.
double augment_op_magnitude(AugmentSpace space, AugmentOp op, int64_t bins, int64_t bin, int64_t h, int64_t w);

// Applies `op` with the (signed) magnitude to `img` in place. `fill` is one byte for every channel
// or one per channel (the warps' outside). `scratch` is reused for the warps and Sharpness.
void apply_augment_op(Image& img, AugmentOp op, double magnitude, const std::vector<int64_t>& fill, Image& scratch);

// PIL's nearest-neighbour affine transform: out(x, y) = in(floor(a0 X + a1 Y + a2),
// floor(a3 X + a4 Y + a5)) at the pixel centre (X, Y) = (x + 0.5, y + 0.5), `fill` outside.
// `a` maps output to input coordinates (PIL's "data").
void affine_nearest(const Image& in, const std::array<double, 6>& a, const std::vector<int64_t>& fill, Image& out);

struct TrivialAugmentWideOptions {
  /// number of magnitude bins, >= 2 (default 31)
  int64_t num_magnitude_bins = 31;
  /// byte written outside the image by the warps: one value 0..255, or one per channel (default 0)
  std::vector<int64_t> fill = {0};

  static TrivialAugmentWideOptions from_json(const Json& j, const std::string& path = "trivial_augment_wide");
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(TrivialAugmentWideOptions)

struct RandAugmentOptions {
  /// operations applied one after the other, >= 0 (default 2)
  int64_t num_ops = 2;
  /// the magnitude bin of every operation, 0..num_magnitude_bins-1 (default 9)
  int64_t magnitude = 9;
  /// number of magnitude bins, >= 2 (default 31)
  int64_t num_magnitude_bins = 31;
  /// byte written outside the image by the warps: one value 0..255, or one per channel (default 0)
  std::vector<int64_t> fill = {0};

  static RandAugmentOptions from_json(const Json& j, const std::string& path = "rand_augment");
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(RandAugmentOptions)

// One drawn operation with its signed magnitude.
struct AugmentChoice {
  AugmentOp op = AugmentOp::identity;
  double magnitude = 0.0;
};

class TrivialAugmentWide : public Transform {
 public:
  explicit TrivialAugmentWide(TrivialAugmentWideOptions o);
  // Draws the op, then the bin, then the sign (always all three, so the stream stays aligned).
  AugmentChoice choose(ImageShape in, SampleRng& rng) const;

  std::string type() const override { return "trivial_augment_wide"; }
  Json to_json() const override;
  ImageShape output_shape(ImageShape in) const override;
  void apply(Image& img, SampleRng& rng, Image& scratch) const override;
  const TrivialAugmentWideOptions& options() const { return o_; }

 private:
  TrivialAugmentWideOptions o_;
};

class RandAugment : public Transform {
 public:
  explicit RandAugment(RandAugmentOptions o);
  // num_ops choices; each draws the op, then the sign.
  std::vector<AugmentChoice> choose(ImageShape in, SampleRng& rng) const;

  std::string type() const override { return "rand_augment"; }
  Json to_json() const override;
  ImageShape output_shape(ImageShape in) const override;
  void apply(Image& img, SampleRng& rng, Image& scratch) const override;
  const RandAugmentOptions& options() const { return o_; }

 private:
  AugmentChoice draw(ImageShape in, SampleRng& rng) const;  // one op, then its sign
  RandAugmentOptions o_;
};

}  // namespace kiln
