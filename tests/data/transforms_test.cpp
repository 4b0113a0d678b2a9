// Transforms: RandomCrop (boxes, padding modes against a naive padded image), HorizontalFlip,
// Normalize (values by hand, f32 and bf16), options JSON, Pipeline order and determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/check.h"
#include "data/augment.h"
#include "data/normalize.h"
#include "data/pipeline.h"
#include "data_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;

namespace {

Image make_image(int64_t h, int64_t w, int64_t c, int64_t seed = 0) {
  Image img;
  img.resize(h, w, c);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k) img.data()[(y * w + x) * c + k] = kt::pattern(seed, y, x, k);
  return img;
}

// The padded image's pixel at (y, x) (padded coordinates), written from the definitions:
// constant = fill; edge = nearest border pixel; reflect = mirror about the border pixel.
int naive_padded(const Image& img, int64_t p, const std::string& mode, int fill, int64_t y, int64_t x, int64_t c) {
  auto map = [&](int64_t v, int64_t n) -> int64_t {
    v -= p;
    if (v >= 0 && v < n) return v;
    if (mode == "constant") return -1;
    if (mode == "edge") return v < 0 ? 0 : n - 1;
    while (v < 0 || v >= n) v = v < 0 ? -v : 2 * (n - 1) - v;  // reflect (no repeat of the border)
    return v;
  };
  int64_t sy = map(y, img.h), sx = map(x, img.w);
  if (sy < 0 || sx < 0) return fill;
  return img.at(sy, sx, c);
}

}  // namespace

using kt::error_of;

TEST(RandomCrop, EveryBoxMatchesNaivePadding) {
  for (std::string mode : {"constant", "edge", "reflect"}) {
    for (auto [h, w, c, p, s] : std::vector<std::array<int64_t, 5>>{{5, 4, 2, 2, 3}, {3, 3, 1, 2, 5}, {6, 7, 3, 1, 6}, {4, 4, 1, 0, 2}}) {
      RandomCropOptions o;
      o.size = s;
      o.padding = p;
      o.padding_mode = mode;
      o.fill = 7;
      RandomCrop crop(o);
      Image in = make_image(h, w, c, 3), out;
      for (int64_t top = 0; top <= h + 2 * p - s; ++top)
        for (int64_t left = 0; left <= w + 2 * p - s; ++left) {
          crop.crop(in, {top, left}, out);
          ASSERT_EQ(out.shape(), (ImageShape{s, s, c}));
          for (int64_t y = 0; y < s; ++y)
            for (int64_t x = 0; x < s; ++x)
              for (int64_t k = 0; k < c; ++k)
                ASSERT_EQ(out.at(y, x, k), naive_padded(in, p, mode, 7, top + y, left + x, k))
                    << mode << " box " << top << "," << left << " at " << y << "," << x << "," << k;
        }
    }
  }
}

TEST(RandomCrop, PaddingModesByHand) {
  Image rows;  // three rows of 1 2 3
  rows.resize(3, 3, 1);
  rows.bytes = {1, 2, 3, 1, 2, 3, 1, 2, 3};
  auto padded = [&](const std::string& mode) {
    RandomCropOptions o;
    o.size = 7;
    o.padding = 2;
    o.padding_mode = mode;
    o.fill = 9;
    Image out;
    RandomCrop(o).crop(rows, {0, 0}, out);  // the whole 7x7 padded image
    return std::vector<uint8_t>(out.bytes.begin() + 3 * 7, out.bytes.begin() + 4 * 7);  // its middle row
  };
  EXPECT_EQ(padded("constant"), (std::vector<uint8_t>{9, 9, 1, 2, 3, 9, 9}));
  EXPECT_EQ(padded("edge"), (std::vector<uint8_t>{1, 1, 1, 2, 3, 3, 3}));
  EXPECT_EQ(padded("reflect"), (std::vector<uint8_t>{3, 2, 1, 2, 3, 2, 1}));
  RandomCropOptions o;
  o.size = 3;
  Image out;
  EXPECT_THROW(RandomCrop(o).crop(rows, {1, 0}, out), Error);  // the box must lie inside
}

TEST(RandomCrop, BoxesFromSeedAreUniformAndFixed) {
  RandomCropOptions o;
  o.size = 28;
  o.padding = 2;
  RandomCrop crop(o);
  std::map<std::pair<int64_t, int64_t>, int> seen;
  for (uint64_t i = 0; i < 5000; ++i) {
    SampleRng rng(SampleRng::sample_key(1, 0, i));
    auto b = crop.choose({28, 28, 1}, rng);
    ASSERT_GE(b.top, 0);
    ASSERT_LE(b.top, 4);
    ASSERT_GE(b.left, 0);
    ASSERT_LE(b.left, 4);
    ++seen[{b.top, b.left}];
  }
  EXPECT_EQ(seen.size(), 25u);                 // every one of the 5 x 5 positions
  for (auto& [box, n] : seen) EXPECT_GT(n, 120);  // about 200 each
  // The same key gives the same box, on any machine: these values are part of the format.
  SampleRng a(SampleRng::sample_key(42, 3, 17)), b(SampleRng::sample_key(42, 3, 17));
  auto ba = crop.choose({28, 28, 1}, a), bb = crop.choose({28, 28, 1}, b);
  EXPECT_EQ(ba.top, bb.top);
  EXPECT_EQ(ba.left, bb.left);
  EXPECT_EQ(ba.top, 2);
  EXPECT_EQ(ba.left, 0);

  // apply() = choose() + crop() on the same stream.
  Image img = make_image(28, 28, 1), scratch, expected;
  SampleRng r1(99), r2(99);
  crop.apply(img, r1, scratch);
  crop.crop(make_image(28, 28, 1), crop.choose({28, 28, 1}, r2), expected);
  EXPECT_EQ(std::vector<uint8_t>(img.bytes.begin(), img.bytes.begin() + img.numel()),
            std::vector<uint8_t>(expected.bytes.begin(), expected.bytes.begin() + expected.numel()));
}

TEST(RandomCrop, ShapesAndErrors) {
  RandomCropOptions o;
  o.size = 32;
  o.padding = 4;
  RandomCrop crop(o);
  EXPECT_EQ(crop.output_shape({32, 32, 3}), (ImageShape{32, 32, 3}));
  EXPECT_EQ(crop.output_shape({0, 0, 3}), (ImageShape{32, 32, 3}));  // varying input, fixed output
  std::string msg = error_of([&] { crop.output_shape({20, 30, 3}); });
  EXPECT_NE(msg.find("random_crop: a 32x32 crop does not fit in a 20x30x3 image padded by 4"), std::string::npos) << msg;

  auto opts = RandomCropOptions::from_json(Json{{"type", "random_crop"}, {"size", 28}, {"padding", 4}});
  EXPECT_EQ(opts.size, 28);
  EXPECT_EQ(opts.padding, 4);
  EXPECT_EQ(opts.padding_mode, "constant");  // defaults
  EXPECT_EQ(opts.fill, 0);
  auto round = RandomCropOptions::from_json(opts.to_json());
  EXPECT_EQ(round.to_json(), opts.to_json());
  msg = error_of([] { RandomCropOptions::from_json(Json{{"size", 28}, {"paddng", 4}}, "data.train_transforms[0]"); });
  EXPECT_NE(msg.find("unknown key data.train_transforms[0].paddng (did you mean data.train_transforms[0].padding?)"), std::string::npos)
      << msg;
  msg = error_of([] { RandomCropOptions::from_json(Json{{"padding", 4}}, "t[0]"); });
  EXPECT_NE(msg.find("t[0].size is required"), std::string::npos) << msg;
  msg = error_of([] { RandomCropOptions::from_json(Json{{"size", 4}, {"padding_mode", "reflct"}}, "t[0]"); });
  EXPECT_NE(msg.find("t[0].padding_mode (did you mean 'reflect'?)"), std::string::npos) << msg;
  msg = error_of([] { RandomCropOptions::from_json(Json{{"size", "28"}}, "t[0]"); });
  EXPECT_NE(msg.find("t[0].size must be an integer, not a string \"28\""), std::string::npos) << msg;
  EXPECT_THROW(RandomCropOptions::from_json(Json{{"size", 4}, {"padding", -1}}), Error);
  EXPECT_THROW(RandomCropOptions::from_json(Json{{"size", 4}, {"fill", 256}}), Error);
}

TEST(HorizontalFlip, MirrorsRowsAndFollowsP) {
  Image img;
  img.resize(2, 3, 2);
  img.bytes = {1, 2, 3, 4, 5, 6,  //
               7, 8, 9, 10, 11, 12};
  HorizontalFlip::flip(img);
  EXPECT_EQ(img.bytes, (std::vector<uint8_t>{5, 6, 3, 4, 1, 2,  //
                                            11, 12, 9, 10, 7, 8}));
  Image odd;
  odd.resize(1, 4, 1);
  odd.bytes = {1, 2, 3, 4};
  HorizontalFlip::flip(odd);
  EXPECT_EQ(odd.bytes, (std::vector<uint8_t>{4, 3, 2, 1}));

  Image scratch;
  for (double p : {0.0, 1.0, 0.3}) {
    HorizontalFlip f(HorizontalFlipOptions{p});
    int flipped = 0;
    for (uint64_t i = 0; i < 4000; ++i) {
      Image one;
      one.resize(1, 2, 1);
      one.bytes = {1, 2};
      SampleRng rng(SampleRng::sample_key(5, 1, i));
      f.apply(one, rng, scratch);
      flipped += one.bytes[0] == 2;
    }
    EXPECT_NEAR(flipped / 4000.0, p, 0.03) << p;
  }
  EXPECT_EQ(HorizontalFlipOptions::from_json(Json::object()).p, 0.5);  // default
  EXPECT_EQ(HorizontalFlipOptions::from_json(Json{{"type", "horizontal_flip"}, {"p", 0.25}}).to_json(), (Json{{"p", 0.25}}));
  std::string msg = error_of([] { HorizontalFlipOptions::from_json(Json{{"p", 1.5}}, "f"); });
  EXPECT_NE(msg.find("f.p: a probability must be in [0, 1], got 1.5"), std::string::npos) << msg;
  msg = error_of([] { HorizontalFlipOptions::from_json(Json{{"prob", 0.5}}, "f"); });
  EXPECT_NE(msg.find("unknown key f.prob"), std::string::npos) << msg;
}

// mode "alternate": each image is mirrored in every other epoch (the epochs by a coin per image),
// about half of them in any epoch, differently for another seed; a stream without a sample (a
// bare key) draws as "random"; "random" draws the same from a sample's stream as from its key.
TEST(HorizontalFlip, AlternateMirrorsEachImageInEveryOtherEpoch) {
  HorizontalFlipOptions alt;
  alt.mode = "alternate";
  const HorizontalFlip f(alt), random(HorizontalFlipOptions{});
  Image scratch;
  auto flipped = [&](const HorizontalFlip& t, SampleRng rng) {
    Image one;
    one.resize(1, 2, 1);
    one.bytes = {1, 2};
    t.apply(one, rng, scratch);
    return one.bytes[0] == 2;
  };
  const int n = 4000;
  for (uint64_t seed : {5u, 6u}) {
    std::vector<bool> prev;
    for (uint64_t epoch = 0; epoch < 5; ++epoch) {
      std::vector<bool> now;
      for (uint64_t i = 0; i < n; ++i) now.push_back(flipped(f, SampleRng::for_sample(seed, epoch, i).fork(1)));
      EXPECT_NEAR(std::count(now.begin(), now.end(), true) / double(n), 0.5, 0.03) << epoch;
      for (size_t i = 0; i < prev.size(); ++i) ASSERT_NE(now[i], prev[i]) << "seed " << seed << ", epoch " << epoch << ", image " << i;
      prev = now;
    }
  }
  int same = 0;  // another seed, other epochs
  for (uint64_t i = 0; i < n; ++i)
    same += flipped(f, SampleRng::for_sample(5, 0, i).fork(1)) == flipped(f, SampleRng::for_sample(6, 0, i).fork(1));
  EXPECT_NEAR(same / double(n), 0.5, 0.03);
  for (uint64_t i = 0; i < 200; ++i) {
    const uint64_t key = SampleRng::sample_key(5, 3, i);
    EXPECT_EQ(flipped(f, SampleRng(key)), flipped(random, SampleRng(key))) << i;
    EXPECT_EQ(flipped(random, SampleRng::for_sample(5, 3, i)), flipped(random, SampleRng(key))) << i;
  }

  EXPECT_EQ(HorizontalFlipOptions::from_json(Json{{"mode", "alternate"}}).to_json(), (Json{{"p", 0.5}, {"mode", "alternate"}}));
  std::string msg = error_of([] { HorizontalFlipOptions::from_json(Json{{"mode", "alternating"}}, "f"); });
  EXPECT_NE(msg.find("f.mode = \"alternating\" is not accepted; accepted: \"random\""), std::string::npos) << msg;
  msg = error_of([] { HorizontalFlipOptions::from_json(Json{{"mode", "alternate"}, {"p", 0.3}}, "f"); });
  EXPECT_NE(msg.find("f.p = 0.3 is not accepted with mode \"alternate\""), std::string::npos) << msg;
}

TEST(Normalize, ValuesByHand) {
  NormalizeOptions o;
  o.mean = {0.5};
  o.std = {0.25};
  Normalize n(o);
  EXPECT_FLOAT_EQ(n.value(0, 0), -2.0f);
  EXPECT_FLOAT_EQ(n.value(255, 0), 2.0f);
  EXPECT_FLOAT_EQ(n.value(51, 0), -1.2f);   // 51/255 = 0.2
  EXPECT_FLOAT_EQ(n.value(51, 2), -1.2f);   // one value: any channel
  Normalize none;                            // defaults: mean 0, std 1 -> pixels / 255
  EXPECT_FLOAT_EQ(none.value(255, 0), 1.0f);
  EXPECT_FLOAT_EQ(none.value(102, 0), 0.4f);

  // Per channel: the CIFAR statistics.
  NormalizeOptions c3;
  c3.mean = {0.4914, 0.4822, 0.4465};
  c3.std = {0.2470, 0.2435, 0.2616};
  Normalize n3(c3);
  Image img;
  img.resize(1, 2, 3);
  img.bytes = {0, 128, 255, 10, 20, 30};
  std::vector<float> out(6);
  n3.write(img, out.data(), DType::f32);
  for (int64_t i = 0; i < 6; ++i) {
    int64_t c = i % 3;
    float expect = static_cast<float>((img.bytes[i] / 255.0 - c3.mean[c]) / c3.std[c]);
    EXPECT_EQ(out[i], expect) << i;  // the table is the formula, rounded once
  }
  EXPECT_NEAR(out[0], -1.98947, 1e-5);
  EXPECT_NEAR(out[2], (1.0 - 0.4465) / 0.2616, 1e-6);
  std::vector<uint16_t> out16(6);
  n3.write(img, out16.data(), DType::bf16);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out16[i], float_to_bf16(out[i]));

  Image gray;
  gray.resize(1, 1, 1);
  std::string msg = error_of([&] { n3.write(gray, out.data(), DType::f32); });
  EXPECT_NE(msg.find("mean/std have 3 values but the images have 1 channels"), std::string::npos) << msg;
  EXPECT_THROW(n3.write(img, out.data(), DType::i64), Error);

  auto j = NormalizeOptions::from_json(Json{{"type", "normalize"}, {"mean", 0.286}, {"std", {0.353}}});
  EXPECT_EQ(j.mean, std::vector<double>{0.286});
  EXPECT_EQ(j.std, std::vector<double>{0.353});
  EXPECT_EQ(NormalizeOptions::from_json(j.to_json()).to_json(), j.to_json());
  msg = error_of([] { NormalizeOptions::from_json(Json{{"mean", {0.1, 0.2}}, {"std", {1, 2, 3}}}, "n"); });
  EXPECT_NE(msg.find("n: mean has 2 values and std 3"), std::string::npos) << msg;
  msg = error_of([] { NormalizeOptions::from_json(Json{{"std", {1, 0}}}, "n"); });
  EXPECT_NE(msg.find("n.std[1]: a standard deviation must be non-zero"), std::string::npos) << msg;
}

TEST(Pipeline, FromJsonOrderAndErrors) {
  Json list = Json::parse(R"([
    {"type": "random_crop", "size": 28, "padding": 4},
    {"type": "horizontal_flip"},
    {"type": "normalize", "mean": [0.286], "std": [0.353]}])");
  Pipeline p = Pipeline::from_json(list, "data.train_transforms");
  ASSERT_EQ(p.num_transforms(), 2u);
  EXPECT_EQ(p.transform(0).type(), "random_crop");
  EXPECT_EQ(p.transform(1).type(), "horizontal_flip");
  EXPECT_EQ(p.output_shape({28, 28, 1}), (ImageShape{28, 28, 1}));
  // to_json writes every option, defaults included, and reads back to the same.
  Json j = p.to_json();
  EXPECT_EQ(j[0]["padding_mode"], "constant");
  EXPECT_EQ(j[1]["p"], 0.5);
  EXPECT_EQ(j[2]["type"], "normalize");
  EXPECT_EQ(Pipeline::from_json(j).to_json(), j);
  EXPECT_EQ(Pipeline::from_json(Json()).num_transforms(), 0u);

  std::string msg = error_of([] {
    Pipeline::from_json(Json::parse(R"([{"type": "normalize"}, {"type": "horizontal_flip"}])"), "data.train_transforms");
  });
  EXPECT_NE(msg.find("data.train_transforms[0]: normalize must be the last transform"), std::string::npos) << msg;
  msg = error_of([] { Pipeline::from_json(Json::parse(R"([{"type": "random_flip"}])"), "data.val_transforms"); });
  EXPECT_NE(msg.find("data.val_transforms[0].type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("accepted: random_crop, horizontal_flip, random_resized_crop, resize, center_crop, color_jitter, trivial_augment_wide, rand_augment, random_erasing, normalize"), std::string::npos) << msg;
  msg = error_of([] { Pipeline::from_json(Json::parse(R"([{"size": 3}])"), "t"); });
  EXPECT_NE(msg.find("t[0]: missing key \"type\""), std::string::npos) << msg;
  msg = error_of([] { Pipeline::from_json(Json{{"type", "normalize"}}, "t"); });
  EXPECT_NE(msg.find("t: expected a list of transforms"), std::string::npos) << msg;
  msg = error_of([] { Pipeline::from_json(Json::parse(R"([{"type": "random_crop", "size": 40}])"), "t").output_shape({28, 28, 1}); });
  EXPECT_NE(msg.find("t[0]: random_crop: a 40x40 crop does not fit in a 28x28x1 image"), std::string::npos) << msg;
  msg = error_of([] {
    Pipeline::from_json(Json::parse(R"([{"type": "normalize", "mean": [0.1, 0.2, 0.3]}])"), "t").output_shape({28, 28, 1});
  });
  EXPECT_NE(msg.find("t[0]: mean/std have 3 values but the images have 1 channels"), std::string::npos) << msg;
}

TEST(Pipeline, DeterministicPerSampleAndStepsIndependent) {
  Pipeline crop_only = Pipeline::from_json(Json::parse(R"([{"type": "random_crop", "size": 6, "padding": 2}])"));
  Pipeline crop_flip =
      Pipeline::from_json(Json::parse(R"([{"type": "random_crop", "size": 6, "padding": 2}, {"type": "horizontal_flip", "p": 1.0}])"));
  Pipeline::Workspace ws;
  std::set<std::string> distinct;  // (strings: GCC 12 misreports a memcmp bound for vector<uint8_t> keys)
  for (uint64_t i = 0; i < 20; ++i) {
    uint64_t key = SampleRng::sample_key(7, 2, i);
    Image a = make_image(6, 6, 3), b = make_image(6, 6, 3), c = make_image(6, 6, 3);
    crop_only.augment(a, key, ws);
    crop_only.augment(b, key, ws);
    crop_flip.augment(c, key, ws);
    std::vector<uint8_t> va(a.bytes.begin(), a.bytes.begin() + a.numel());
    EXPECT_EQ(va, std::vector<uint8_t>(b.bytes.begin(), b.bytes.begin() + b.numel()));
    // Adding a step after the crop leaves the crop's draw unchanged: c is a's mirror image.
    HorizontalFlip::flip(c);
    EXPECT_EQ(va, std::vector<uint8_t>(c.bytes.begin(), c.bytes.begin() + c.numel()));
    distinct.insert(std::string(va.begin(), va.end()));
  }
  EXPECT_GT(distinct.size(), 10u);  // different samples, different crops
  // Same index, other epoch or seed: another draw (for at least one of a few samples).
  int changed = 0;
  for (uint64_t i = 0; i < 5; ++i) {
    Image a = make_image(6, 6, 3), b = make_image(6, 6, 3);
    crop_only.augment(a, SampleRng::sample_key(7, 2, i), ws);
    crop_only.augment(b, SampleRng::sample_key(7, 3, i), ws);
    changed += a.bytes != b.bytes;
  }
  EXPECT_GT(changed, 0);
}
