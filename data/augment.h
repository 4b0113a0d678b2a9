// Geometric augmentations on uint8 HWC images:
//   RandomCrop     pad every side by `padding`, then cut a size x size window at a uniformly random
//                  position (top first, then left, as torchvision does)
//   HorizontalFlip mirror left-right with probability p; or, mode "alternate", each image mirrored
//                  in every other epoch (Jordan's alternating flip, "94% on CIFAR-10 in 3.29
//                  seconds", arXiv:2404.00498): a fair coin per image picks the epochs, so an
//                  epoch still mirrors about half the images and each image is seen both ways in
//                  every two epochs
// Each has an options struct whose JSON keys are its field names. RandomCrop's output (size x size)
// is bounded by kMaxTransformPixels (data/transform.h) before it is allocated; its padding is never
// allocated. Tests: tests/data/transforms_test.cpp, tests/data/hardened_input_test.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "data/transform.h"

namespace kiln {

struct RandomCropOptions {
  /// side of the square output in pixels (required, > 0)
  int64_t size = 0;
  /// pixels added on each of the four sides before cropping (default 0)
  int64_t padding = 0;
  /// how padding is filled: "constant" (the byte `fill`), "edge" (repeat the border pixel) or
  /// "reflect" (mirror, not repeating the border pixel) (default "constant")
  std::string padding_mode = "constant";
  /// byte value of "constant" padding, 0..255 (default 0)
  int64_t fill = 0;

  // `path` names the options in errors ("data.train_transforms[0]"); "type" is accepted and ignored.
  static RandomCropOptions from_json(const Json& j, const std::string& path = "random_crop");
  Json to_json() const;  // without "type"
};
KILN_JSON_CONVERSIONS(RandomCropOptions)

class RandomCrop : public Transform {
 public:
  explicit RandomCrop(RandomCropOptions o);
  // Top-left corner of the window in padded coordinates: both in [0, side + 2 * padding - size].
  struct Box {
    int64_t top = 0, left = 0;
  };
  Box choose(ImageShape in, SampleRng& rng) const;
  // Writes the size x size window at `box` of the padded `in` into `out`.
  void crop(const Image& in, Box box, Image& out) const;

  std::string type() const override { return "random_crop"; }
  Json to_json() const override;
  ImageShape output_shape(ImageShape in) const override;
  void apply(Image& img, SampleRng& rng, Image& scratch) const override;
  const RandomCropOptions& options() const { return o_; }

 private:
  RandomCropOptions o_;
  int border_ = 0;  // OpenCV border type for padding_mode
};

struct HorizontalFlipOptions {
  /// probability of mirroring an image, 0..1 (default 0.5)
  double p = 0.5;
  /// "random" (each epoch draws anew) or "alternate" (each image mirrored in every other epoch,
  /// the epochs by a coin per image; p must be 0.5) (default "random")
  std::string mode = "random";

  static HorizontalFlipOptions from_json(const Json& j, const std::string& path = "horizontal_flip");
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(HorizontalFlipOptions)

class HorizontalFlip : public Transform {
 public:
  explicit HorizontalFlip(HorizontalFlipOptions o);
  static void flip(Image& img);  // in place

  std::string type() const override { return "horizontal_flip"; }
  Json to_json() const override;
  ImageShape output_shape(ImageShape in) const override { return in; }
  void apply(Image& img, SampleRng& rng, Image& scratch) const override;
  int64_t min_input_side(int64_t need) const override { return need; }
  const HorizontalFlipOptions& options() const { return o_; }

 private:
  HorizontalFlipOptions o_;
  bool alternate_ = false;
};

}  // namespace kiln
