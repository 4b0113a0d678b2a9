// RandomResizedCrop (box inside the image, within the scale and ratio bounds, torchvision's fallback),
// Resize (output sizes as torchvision computes them), CenterCrop (box and zero padding), ColorJitter
// (hand-computed PIL arithmetic), the registry names and min_source_side().
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "data/color.h"
#include "data/pipeline.h"
#include "data/resize.h"
#include "data_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;

namespace {
Image pattern_image(int64_t h, int64_t w, int64_t c, int64_t seed = 0) {
  Image img;
  img.resize(h, w, c);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k) img.bytes[static_cast<size_t>((y * w + x) * c + k)] = kt::pattern(seed, y, x, k);
  return img;
}
Image constant_image(int64_t h, int64_t w, int64_t c, uint8_t v) {
  Image img;
  img.resize(h, w, c);
  std::fill(img.bytes.begin(), img.bytes.end(), v);
  return img;
}
}  // namespace

TEST(RandomResizedCrop, BoxesInsideAndWithinBounds) {
  RandomResizedCropOptions o;
  o.size = 224;
  RandomResizedCrop t(o);
  int fallbacks = 0;
  for (auto [H, W] : {std::pair<int64_t, int64_t>{375, 500}, {500, 375}, {64, 64}, {1000, 90}}) {
    for (uint64_t k = 0; k < 2000; ++k) {
      SampleRng rng(SampleRng::sample_key(1, 0, k));
      CropBox b = t.choose(H, W, rng);
      ASSERT_GE(b.top, 0);
      ASSERT_GE(b.left, 0);
      ASSERT_GT(b.h, 0);
      ASSERT_GT(b.w, 0);
      ASSERT_LE(b.top + b.h, H);
      ASSERT_LE(b.left + b.w, W);
      const bool fallback = b.h == H || b.w == W;
      if (fallback && H == 1000) ++fallbacks;
      if (fallback) continue;  // the fallback box may break the bounds (clamped ratio, whole image)
      // w, h are rounded from exact sqrt values: allow half a pixel each way.
      const double area = static_cast<double>(H * W);
      EXPECT_GE((b.w + 0.5) * (b.h + 0.5), 0.08 * area);
      EXPECT_LE((b.w - 0.5) * (b.h - 0.5), 1.0 * area);
      EXPECT_GE((b.w + 0.5) / (b.h - 0.5), 3.0 / 4.0);
      EXPECT_LE((b.w - 0.5) / (b.h + 0.5), 4.0 / 3.0);
    }
  }
  EXPECT_GT(fallbacks, 0);  // a 1000 x 90 image often needs the fallback
}

TEST(RandomResizedCrop, HandCheckedBoxes) {
  RandomResizedCropOptions o;
  o.size = 4;
  o.scale = {1.0, 1.0};
  o.ratio = {1.0, 1.0};
  RandomResizedCrop whole(o);
  SampleRng rng(5);
  EXPECT_EQ(whole.choose(10, 10, rng), (CropBox{0, 0, 10, 10}));
  // Half the area of 10 x 20 as a square: 10 x 10 (round(sqrt(100))), at any left in [0, 10].
  o.scale = {0.5, 0.5};
  RandomResizedCrop half(o);
  std::set<int64_t> lefts;
  for (uint64_t k = 0; k < 300; ++k) {
    SampleRng r(k);
    CropBox b = half.choose(10, 20, r);
    EXPECT_EQ(b.top, 0);
    EXPECT_EQ(b.h, 10);
    EXPECT_EQ(b.w, 10);
    lefts.insert(b.left);
  }
  EXPECT_EQ(lefts.size(), 11u);
  // Fallback: 2 x 100 fits no square of area >= 100; the ratio is clamped to 1: a centred 2 x 2.
  o.scale = {0.5, 1.0};
  RandomResizedCrop fb(o);
  EXPECT_EQ(fb.choose(2, 100, rng), (CropBox{0, 49, 2, 2}));
  // The image: a constant image stays constant, the output is size x size.
  Image img = constant_image(30, 40, 3, 77), scratch;
  SampleRng r2(3);
  RandomResizedCrop(RandomResizedCropOptions{.size = 8}).apply(img, r2, scratch);
  EXPECT_EQ(img.shape(), (ImageShape{8, 8, 3}));
  for (int64_t i = 0; i < img.numel(); ++i) ASSERT_EQ(img.bytes[static_cast<size_t>(i)], 77);
}

TEST(Resize, OutputSizesAsTorchvision) {
  Resize r(ResizeOptions{.size = 256});
  EXPECT_EQ(r.output_size(375, 500), (std::pair<int64_t, int64_t>{256, 341}));  // int(256 * 500 / 375) = 341
  EXPECT_EQ(r.output_size(500, 375), (std::pair<int64_t, int64_t>{341, 256}));
  EXPECT_EQ(r.output_size(100, 100), (std::pair<int64_t, int64_t>{256, 256}));
  EXPECT_EQ(r.output_size(256, 999), (std::pair<int64_t, int64_t>{256, 999}));  // already there: unchanged
  EXPECT_EQ(r.output_shape({28, 28, 1}), (ImageShape{256, 256, 1}));
  EXPECT_EQ(r.output_shape({0, 0, 3}), (ImageShape{0, 0, 3}));
  // Pixels: a downscale by 2 with "area" averages 2 x 2 blocks exactly.
  Image img;
  img.resize(4, 6, 1);
  for (int i = 0; i < 24; ++i) img.bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 8);
  Image scratch;
  SampleRng rng(0);
  Resize(ResizeOptions{.size = 2}).apply(img, rng, scratch);
  ASSERT_EQ(img.shape(), (ImageShape{2, 3, 1}));
  // block (0, 0): values 0, 8, 48, 56 -> 28
  EXPECT_EQ(img.bytes[0], 28);
  EXPECT_EQ(img.bytes[5], (16 * 8 + 17 * 8 + 22 * 8 + 23 * 8) / 4);
}

TEST(CenterCrop, BoxAndPadding) {
  CenterCrop c(CenterCropOptions{.size = 224});
  EXPECT_EQ(c.box(256, 341), (CropBox{16, 58, 224, 224}));  // round(58.5) = 58 (half to even)
  EXPECT_EQ(c.box(257, 300), (CropBox{16, 38, 224, 224}));  // round(16.5) = 16
  EXPECT_EQ(c.box(259, 300), (CropBox{18, 38, 224, 224}));  // round(17.5) = 18
  Image img = pattern_image(10, 9, 2), scratch;
  SampleRng rng(0);
  CenterCrop(CenterCropOptions{.size = 4}).apply(img, rng, scratch);
  ASSERT_EQ(img.shape(), (ImageShape{4, 4, 2}));
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x = 0; x < 4; ++x)  // top 3, left round(2.5) = 2
      for (int64_t k = 0; k < 2; ++k) ASSERT_EQ(img.at(y, x, k), kt::pattern(0, y + 3, x + 2, k));
  // 3 x 5 into 4: one zero row below (torchvision pads (4-3)//2 = 0 above, 1 below); columns from 0.
  img = pattern_image(3, 5, 1);
  CenterCrop(CenterCropOptions{.size = 4}).apply(img, rng, scratch);
  for (int64_t x = 0; x < 4; ++x) {
    for (int64_t y = 0; y < 3; ++y) EXPECT_EQ(img.at(y, x, 0), kt::pattern(0, y, x, 0));
    EXPECT_EQ(img.at(3, x, 0), 0);
  }
}

TEST(ColorJitter, PilArithmetic) {
  Image img;
  img.resize(1, 2, 3);
  const uint8_t px[6] = {100, 201, 7, 100, 150, 200};
  std::copy(px, px + 6, img.bytes.begin());
  Image a = img;
  ColorJitter::adjust(a, 0.5, 1.0, 1.0);  // 100.5 -> 100 (truncated), 3.5 -> 3
  EXPECT_EQ(std::vector<uint8_t>(a.bytes.begin(), a.bytes.begin() + 6), (std::vector<uint8_t>{50, 100, 3, 50, 75, 100}));
  a = img;
  // greys: (29900 + 117987 + 798 + 500) / 1000 = 149, (29900 + 88050 + 22800 + 500) / 1000 = 141; mean 145
  ColorJitter::adjust(a, 1.0, 0.0, 1.0);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.bytes[static_cast<size_t>(i)], 145);
  a = img;
  ColorJitter::adjust(a, 1.0, 1.0, 2.0);  // 141 + 2 * (100 - 141) = 59, 141 + 2 * 9 = 159, 259 -> 255
  EXPECT_EQ(a.bytes[3], 59);
  EXPECT_EQ(a.bytes[4], 159);
  EXPECT_EQ(a.bytes[5], 255);
  a = img;
  ColorJitter::adjust(a, 1.0, 1.0, 0.0);
  EXPECT_EQ(a.bytes[0], 149);
  EXPECT_EQ(a.bytes[2], 149);
  // Factors stay in [1 - x, 1 + x]: brightness 0.2 on a constant 100 gives 80..120.
  ColorJitter t(ColorJitterOptions{.brightness = 0.2});
  for (uint64_t k = 0; k < 200; ++k) {
    Image c = constant_image(2, 2, 3, 100), s;
    SampleRng r(k);
    t.apply(c, r, s);
    EXPECT_GE(c.bytes[0], 80);
    EXPECT_LE(c.bytes[0], 120);
  }
}

TEST(Pipeline, NewTransformsFromJsonAndReducedDecodeSide) {
  Pipeline train = Pipeline::from_json(Json::parse(R"([{"type": "random_resized_crop", "size": 224},
      {"type": "horizontal_flip"}, {"type": "color_jitter", "brightness": 0.4},
      {"type": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}])"));
  Pipeline eval = Pipeline::from_json(Json::parse(R"([{"type": "resize", "size": 256},
      {"type": "center_crop", "size": 224}, {"type": "normalize", "mean": [0.5], "std": [0.5]}])"));
  EXPECT_EQ(train.output_shape({0, 0, 3}), (ImageShape{224, 224, 3}));
  EXPECT_EQ(eval.output_shape({0, 0, 3}), (ImageShape{224, 224, 3}));
  EXPECT_EQ(train.min_source_side(), 915);  // ceil(224 * sqrt((4/3) / 0.08))
  EXPECT_EQ(eval.min_source_side(), 256);
  EXPECT_EQ(Pipeline::from_json(Json::parse(R"([{"type": "random_crop", "size": 4}])")).min_source_side(), 0);
  EXPECT_EQ(Pipeline::from_json(Json::parse(R"([{"type": "horizontal_flip"}])")).min_source_side(), 0);
  EXPECT_EQ(Pipeline::from_json(train.to_json()).to_json(), train.to_json());
  EXPECT_HAS(kt::error_of([] { Pipeline::from_json(Json::parse(R"([{"type": "random_resized_crop", "size": 8, "scale": [0.5, 0.1]}])"), "t"); }),
             "t[0].scale: expected [min, max] with 0 < min <= max");
  EXPECT_HAS(kt::error_of([] { Pipeline::from_json(Json::parse(R"([{"type": "resize", "size": 8, "interpolation": "cubic"}])"), "t"); }),
             "t[0].interpolation");
  EXPECT_HAS(kt::error_of([] { Pipeline::from_json(Json::parse(R"([{"type": "color_jitter", "hue": 0.1}])"), "t"); }),
             "hue");
}
