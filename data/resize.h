// Transforms that resample or cut to the sizes of torchvision's ImageNet recipes, on uint8 HWC:
//   RandomResizedCrop  torchvision's algorithm: up to 10 tries of an area fraction s ~ U(scale) and
//                      a log-uniform aspect ratio r (w/h); w = round(sqrt(s*A*r)), h = round(sqrt(s*A/r))
//                      (round half to even, as Python); the first box with 0 < w <= W and
//                      0 < h <= H is placed at top ~ U{0..H-h}, left ~ U{0..W-w}; after 10 misses
//                      the fallback is the largest centred box whose ratio is clamped into `ratio`.
//                      The box is then resized to size x size.
//   Resize             the shorter side to `size`, the longer to int(size * long / short)
//                      (truncated, as torchvision); an image whose shorter side already is `size` is
//                      left as it is.
//   CenterCrop         a size x size box at top = round((H - size) / 2), left = round((W - size) / 2)
//                      (half to even); a side shorter than `size` is padded with zeros, the image
//                      sitting at (size - side) / 2 (torchvision's pad-then-crop).
// Interpolation (RandomResizedCrop, Resize): "auto" (default) uses cv::INTER_AREA when the image
// shrinks in both directions (an antialiasing box filter, close to PIL's antialiased bilinear that
// torchvision applies to PIL images) and cv::INTER_LINEAR otherwise; "linear" and "area" force one.
// Reduced decoding (Transform::min_input_side): Resize needs a shorter side of `size`;
// RandomResizedCrop needs size * max(sqrt(ratio_max / scale_min), 1 / sqrt(ratio_min * scale_min)),
// so that even its smallest, most elongated box keeps at least `size` pixels on each side
// (915 for 224 with the default scale and ratio); CenterCrop cuts at pixel positions and forbids
// reduction.
// Output bound: each step's output size is checked against kMaxTransformPixels (data/transform.h)
// in output_shape() and before apply() allocates, and resize_image() checks it once more.
// Tests: tests/data/resize_test.cpp, tests/data/hardened_input_test.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/transform.h"

namespace kiln {

struct RandomResizedCropOptions {
  /// side of the square output in pixels (required, > 0)
  int64_t size = 0;
  /// [min, max] fraction of the image area the box covers, 0 < min <= max (default [0.08, 1])
  std::vector<double> scale = {0.08, 1.0};
  /// [min, max] aspect ratio w/h of the box, drawn log-uniformly, 0 < min <= max (default [3/4, 4/3])
  std::vector<double> ratio = {3.0 / 4.0, 4.0 / 3.0};
  /// "auto", "linear" or "area" (see the file comment) (default "auto")
  std::string interpolation = "auto";

  static RandomResizedCropOptions from_json(const Json& j, const std::string& path = "random_resized_crop");
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(RandomResizedCropOptions)

class RandomResizedCrop : public Transform {
 public:
  explicit RandomResizedCrop(RandomResizedCropOptions o);
  CropBox choose(int64_t height, int64_t width, SampleRng& rng) const;

  std::string type() const override { return "random_resized_crop"; }
  Json to_json() const override;
  ImageShape output_shape(ImageShape in) const override;  // bounded (transform.h)
  void apply(Image& img, SampleRng& rng, Image& scratch) const override;
  int64_t min_input_side(int64_t need) const override;
  const RandomResizedCropOptions& options() const { return o_; }

 private:
  RandomResizedCropOptions o_;
};

struct ResizeOptions {
  /// the shorter side after resizing, in pixels (required, > 0)
  int64_t size = 0;
  /// "auto", "linear" or "area" (see the file comment) (default "auto")
  std::string interpolation = "auto";

  static ResizeOptions from_json(const Json& j, const std::string& path = "resize");
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(ResizeOptions)

class Resize : public Transform {
 public:
  explicit Resize(ResizeOptions o);
  // (height, width) after resizing an image of (h, w); throws naming the step when that is over the
  // output bound (checked_output_size, data/transform.h), before anything is allocated.
  std::pair<int64_t, int64_t> output_size(int64_t h, int64_t w) const;

  std::string type() const override { return "resize"; }
  Json to_json() const override;
  ImageShape output_shape(ImageShape in) const override;
  void apply(Image& img, SampleRng& rng, Image& scratch) const override;
  int64_t min_input_side(int64_t need) const override { return o_.size; }
  const ResizeOptions& options() const { return o_; }

 private:
  ResizeOptions o_;
};

struct CenterCropOptions {
  /// side of the square output in pixels (required, > 0)
  int64_t size = 0;

  static CenterCropOptions from_json(const Json& j, const std::string& path = "center_crop");
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(CenterCropOptions)

class CenterCrop : public Transform {
 public:
  explicit CenterCrop(CenterCropOptions o);
  // The box in input coordinates; negative top/left (and a box past the far edge) mean zero padding.
  CropBox box(int64_t height, int64_t width) const;

  std::string type() const override { return "center_crop"; }
  Json to_json() const override;
  ImageShape output_shape(ImageShape in) const override;  // bounded (transform.h)
  void apply(Image& img, SampleRng& rng, Image& scratch) const override;
  const CenterCropOptions& options() const { return o_; }

 private:
  CenterCropOptions o_;
};

// Resizes `in` to out_h x out_w into `out` with the rule of `interpolation` ("auto", "linear", "area").
void resize_image(const Image& in, const CropBox& box, int64_t out_h, int64_t out_w, const std::string& interpolation,
                  Image& out);

}  // namespace kiln
