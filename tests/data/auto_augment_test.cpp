// TrivialAugmentWide, RandAugment (data/auto_augment.h) and RandomErasing (data/erasing.h):
// every operation against torchvision 0.14 on PIL images (tests/fixtures/augment/ops.json, made by
// make_augment_fixture.py beside it), the magnitude tables, the draws, determinism for any worker
// count, 1- and 3-channel images, option errors naming the JSON path.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "core/check.h"
#include "data/auto_augment.h"
#include "data/erasing.h"
#include "data/loader.h"
#include "data/pipeline.h"
#include "data/synthetic.h"
#include "data_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;
using kt::error_of;

namespace {

const Json& fixture() {
  static const Json j = [] {
    std::ifstream f(std::string(KILN_SOURCE_DIR) + "/tests/fixtures/augment/ops.json");
    KILN_CHECK(f.good(), "cannot open tests/fixtures/augment/ops.json");
    return Json::parse(f);
  }();
  return j;
}

Image decode(const Json& j) {
  Image img;
  img.resize(j["h"].get<int64_t>(), j["w"].get<int64_t>(), j["c"].get<int64_t>());
  const std::string hex = j["hex"].get<std::string>();
  EXPECT_EQ(static_cast<int64_t>(hex.size()), 2 * img.numel());
  for (int64_t i = 0; i < img.numel(); ++i)
    img.data()[i] = static_cast<uint8_t>(std::stoi(hex.substr(static_cast<size_t>(2 * i), 2), nullptr, 16));
  return img;
}

Image make_image(int64_t h, int64_t w, int64_t c, uint64_t seed) {
  Image img;
  img.resize(h, w, c);
  SampleRng rng(seed);
  for (int64_t i = 0; i < img.numel(); ++i) img.data()[i] = static_cast<uint8_t>(rng.uniform_int(256));
  return img;
}

bool same_bytes(const Image& a, const Image& b) {
  return a.shape() == b.shape() && std::equal(a.data(), a.data() + a.numel(), b.data());
}

bool is_warp(AugmentOp op) {
  return op == AugmentOp::shear_x || op == AugmentOp::shear_y || op == AugmentOp::translate_x ||
         op == AugmentOp::translate_y || op == AugmentOp::rotate;
}

}  // namespace

TEST(AutoAugmentGolden, OpNamesAndOrderAsTorchvision) {
  const Json& order = fixture()["op_order"];
  ASSERT_EQ(order.size(), static_cast<size_t>(kNumAugmentOps));
  for (int i = 0; i < kNumAugmentOps; ++i) {
    EXPECT_EQ(order[i].get<std::string>(), augment_op_name(static_cast<AugmentOp>(i)));
    EXPECT_EQ(augment_op_from_name(order[i].get<std::string>()), static_cast<AugmentOp>(i));
  }
  EXPECT_HAS(error_of([] { augment_op_from_name("Invert"); }), "ShearX");
}

// The magnitude tables of both spaces (31 and 10 bins; RandAugment's translations on a 24 x 20
// image), signed flags included.
TEST(AutoAugmentGolden, MagnitudeTablesAsTorchvision) {
  const Json& spaces = fixture()["spaces"];
  const int64_t h = fixture()["rand_augment_image_size"][0], w = fixture()["rand_augment_image_size"][1];
  int checked = 0;
  for (auto [key, space] : {std::pair{"trivial_augment_wide", AugmentSpace::trivial_augment_wide},
                            {"rand_augment", AugmentSpace::rand_augment}})
    for (int64_t bins : {31, 10}) {
      const Json& table = spaces[key][std::to_string(bins)];
      for (int i = 0; i < kNumAugmentOps; ++i) {
        const auto op = static_cast<AugmentOp>(i);
        const Json& t = table[augment_op_name(op)];
        EXPECT_EQ(t["signed"].get<bool>(), augment_op_signed(op)) << key << " " << augment_op_name(op);
        const auto& mags = t["magnitudes"];
        if (mags.size() == 1) {  // no magnitude: torchvision's tensor(0.0)
          for (int64_t b = 0; b < bins; ++b) EXPECT_EQ(augment_op_magnitude(space, op, bins, b, h, w), 0.0);
          continue;
        }
        ASSERT_EQ(mags.size(), static_cast<size_t>(bins));
        for (int64_t b = 0; b < bins; ++b) {
          const double ref = mags[b].get<double>(), got = augment_op_magnitude(space, op, bins, b, h, w);
          EXPECT_NEAR(got, ref, 1e-6 * std::max(1.0, std::fabs(ref)))
              << key << " bins " << bins << " " << augment_op_name(op) << " bin " << b;
          ++checked;
        }
      }
    }
  EXPECT_GT(checked, 400);
}

// Every op at fixed magnitudes on a 24x20 RGB photo, a Fashion-MNIST image and a low-contrast
// grey image, against torchvision's _apply_op on PIL images. Lookup-table ops must be exact; the
// PIL ImageEnhance blends are float arithmetic and may differ by one step of truncation (|d| <= 1);
// the warps replicate PIL's nearest-neighbour stepping, so a pixel can only differ where a source
// coordinate lies within rounding of a pixel edge (cos/sin and tan of libm against Python's, and
// our round(x, 15)): at most 1% of pixels may differ.
TEST(AutoAugmentGolden, EveryOpAsTorchvisionOnPil) {
  const Json& f = fixture();
  std::map<std::string, Image> images;
  for (auto& [name, j] : f["images"].items()) images[name] = decode(j);
  Image scratch;
  std::set<std::string> seen;
  int64_t warp_pixels = 0, warp_diff = 0;
  for (const Json& c : f["cases"]) {
    const std::string op_name = c["op"].get<std::string>();
    const AugmentOp op = augment_op_from_name(op_name);
    const double m = c["magnitude"].get<double>();
    std::vector<int64_t> fill = {0};
    if (!c["fill"].is_null()) fill = c["fill"].get<std::vector<int64_t>>();
    Image img = images.at(c["image"].get<std::string>());
    apply_augment_op(img, op, m, fill, scratch);
    const Image want = decode(c["out"]);
    const std::string what = op_name + "(" + std::to_string(m) + ") on " + c["image"].get<std::string>();
    ASSERT_EQ(img.shape(), want.shape()) << what;
    int64_t diff = 0, maxdiff = 0;
    for (int64_t i = 0; i < img.numel(); ++i) {
      const int64_t d = std::abs(static_cast<int>(img.data()[i]) - static_cast<int>(want.data()[i]));
      diff += d != 0;
      maxdiff = std::max(maxdiff, d);
    }
    if (is_warp(op)) {
      EXPECT_LE(diff, img.numel() / 100) << what << ": " << diff << " of " << img.numel() << " bytes differ";
      warp_pixels += img.numel();
      warp_diff += diff;
    } else if (op == AugmentOp::brightness || op == AugmentOp::color || op == AugmentOp::contrast ||
               op == AugmentOp::sharpness) {
      EXPECT_LE(maxdiff, 1) << what;
    } else {
      EXPECT_EQ(diff, 0) << what << " (max |diff| " << maxdiff << ")";
    }
    seen.insert(op_name);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kNumAugmentOps));
  RecordProperty("warp_bytes_differing", std::to_string(warp_diff) + " of " + std::to_string(warp_pixels));
  std::printf("warps: %lld of %lld bytes differ from torchvision/PIL\n", static_cast<long long>(warp_diff),
              static_cast<long long>(warp_pixels));
}

TEST(AutoAugment, WarpsByHand) {
  Image img;  // 3 x 4, values 1..12
  img.resize(3, 4, 1);
  for (int i = 0; i < 12; ++i) img.data()[i] = static_cast<uint8_t>(i + 1);
  Image scratch, t = img;
  apply_augment_op(t, AugmentOp::translate_x, 1.9, {0}, scratch);  // int(1.9) = 1 pixel right
  EXPECT_EQ(std::vector<uint8_t>(t.data(), t.data() + 12),
            (std::vector<uint8_t>{0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11}));
  t = img;
  apply_augment_op(t, AugmentOp::translate_y, -1.0, {99}, scratch);  // one row up, fill 99
  EXPECT_EQ(std::vector<uint8_t>(t.data(), t.data() + 12),
            (std::vector<uint8_t>{5, 6, 7, 8, 9, 10, 11, 12, 99, 99, 99, 99}));
  t = img;
  apply_augment_op(t, AugmentOp::rotate, 180.0, {0}, scratch);
  EXPECT_EQ(std::vector<uint8_t>(t.data(), t.data() + 12),
            (std::vector<uint8_t>{12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}));
  t = img;
  // about the top-left corner: output (x, y) samples floor((x + 0.5) + (y + 0.5)) in row y
  apply_augment_op(t, AugmentOp::shear_x, 1.0, {0}, scratch);
  EXPECT_EQ(std::vector<uint8_t>(t.data(), t.data() + 12),
            (std::vector<uint8_t>{2, 3, 4, 0, 7, 8, 0, 0, 12, 0, 0, 0}));
}

TEST(AutoAugment, ColorIsIdentityOnGreyAndOpsKeepShape) {
  Image grey = make_image(28, 28, 1, 5), scratch;
  for (double m : {-0.9, 0.5, 0.99}) {
    Image t = grey;
    apply_augment_op(t, AugmentOp::color, m, {0}, scratch);
    EXPECT_TRUE(same_bytes(t, grey)) << m;
  }
  // every op at a small and a large magnitude on tiny and odd-sized images: the shape is kept
  for (auto [h, w] : {std::pair<int64_t, int64_t>{1, 1}, {2, 3}, {3, 1}, {7, 9}})
    for (int64_t c : {1, 3})
      for (int i = 0; i < kNumAugmentOps; ++i)
        for (double m : {0.5, -30.0}) {
          const auto op = static_cast<AugmentOp>(i);
          Image t = make_image(h, w, c, 6);
          apply_augment_op(t, op, op == AugmentOp::posterize ? 4.0 : op == AugmentOp::solarize ? 100 : m, {3},
                           scratch);
          EXPECT_EQ(t.shape(), (ImageShape{h, w, c})) << augment_op_name(op);
        }
}

TEST(AutoAugment, DrawsCoverOpsBinsAndSigns) {
  TrivialAugmentWide ta({});
  std::set<int> ops;
  std::set<double> mags;
  int negative = 0;
  for (uint64_t k = 0; k < 4000; ++k) {
    SampleRng rng(SampleRng::sample_key(1, 0, k));
    AugmentChoice ch = ta.choose({32, 32, 3}, rng);
    ops.insert(static_cast<int>(ch.op));
    if (ch.op == AugmentOp::rotate) mags.insert(std::fabs(ch.magnitude));
    negative += ch.magnitude < 0;
    if (!augment_op_signed(ch.op)) {
      EXPECT_GE(ch.magnitude, 0.0);
    }
  }
  EXPECT_EQ(ops.size(), static_cast<size_t>(kNumAugmentOps));
  EXPECT_EQ(mags.size(), 31u);  // every bin of Rotate drawn
  EXPECT_GT(negative, 4000 * 9 / 14 / 2 * 8 / 10);
  EXPECT_LT(negative, 4000 * 9 / 14 / 2 * 12 / 10);

  RandAugmentOptions o;
  o.num_ops = 3;
  o.magnitude = 30;
  RandAugment ra(o);
  for (uint64_t k = 0; k < 50; ++k) {
    SampleRng rng(SampleRng::sample_key(1, 0, k));
    auto chosen = ra.choose({24, 20, 3}, rng);
    ASSERT_EQ(chosen.size(), 3u);
    for (const auto& ch : chosen)
      EXPECT_DOUBLE_EQ(std::fabs(ch.magnitude),
                       augment_op_magnitude(AugmentSpace::rand_augment, ch.op, 31, 30, 24, 20));
  }
  // num_ops = 0 changes nothing.
  o.num_ops = 0;
  Image img = make_image(8, 8, 3, 2), before = img, scratch;
  SampleRng rng(7);
  RandAugment(o).apply(img, rng, scratch);
  EXPECT_TRUE(same_bytes(img, before));
}

// The pipeline applied by hand equals its own replay, and the loader gives the same batches for 0,
// 1 and 3 workers, on 1- and 3-channel images.
TEST(AutoAugment, DeterministicForAnyWorkerCount) {
  for (int64_t c : {1, 3}) {
    SyntheticOptions so;
    so.size = 45;
    so.height = 28;
    so.width = 28;
    so.channels = c;
    so.num_classes = 10;
    so.seed = 4;
    auto ds = std::make_shared<SyntheticDataset>(so);
    const Json steps = Json::parse(R"([
      {"type": "trivial_augment_wide"},
      {"type": "rand_augment", "num_ops": 2, "magnitude": 15, "fill": 128},
      {"type": "random_erasing", "p": 0.7, "value": "random"}])");
    Pipeline p = Pipeline::from_json(steps);
    // Same key: same bytes; another epoch: different bytes.
    Sample s;
    ds->get_into(3, s);
    Pipeline::Workspace ws;
    Image a = s.image, b = s.image, e1 = s.image;
    p.augment(a, SampleRng::sample_key(9, 0, 3), ws);
    p.augment(b, SampleRng::sample_key(9, 0, 3), ws);
    p.augment(e1, SampleRng::sample_key(9, 1, 3), ws);
    EXPECT_TRUE(same_bytes(a, b));
    EXPECT_FALSE(same_bytes(a, e1));

    std::vector<std::vector<float>> runs;
    for (int64_t workers : {0, 1, 3}) {
      LoaderOptions o;
      o.batch_size = 8;
      o.workers = workers;
      o.seed = 9;
      Json with_norm = steps;
      with_norm.push_back(Json{{"type", "normalize"}, {"mean", std::vector<double>(c, 0.5)},
                               {"std", std::vector<double>(c, 0.25)}});
      DataLoader l(ds, Pipeline::from_json(with_norm), o);
      std::vector<float> all;
      for (int64_t epoch : {0, 1}) {
        l.start_epoch(epoch);
        Batch batch;
        while (l.next(batch)) {
          auto v = batch.images.to_float_vector();
          all.insert(all.end(), v.begin(), v.end());
        }
      }
      runs.push_back(std::move(all));
    }
    EXPECT_EQ(runs[0].size(), static_cast<size_t>(2 * 45 * 28 * 28 * c));
    EXPECT_TRUE(runs[0] == runs[1]) << c << " channels";
    EXPECT_TRUE(runs[0] == runs[2]) << c << " channels";
  }
}

TEST(RandomErasing, BoxesFollowScaleRatioAndP) {
  RandomErasingOptions o;
  o.p = 1.0;
  RandomErasing re(o);
  int erased = 0;
  for (uint64_t k = 0; k < 2000; ++k) {
    SampleRng rng(SampleRng::sample_key(2, 0, k));
    CropBox b = re.choose({40, 30, 3}, rng);
    if (b.h == 0 && b.w == 0) continue;
    ++erased;
    EXPECT_LT(b.h, 40);
    EXPECT_LT(b.w, 30);
    EXPECT_GE(b.top, 0);
    EXPECT_GE(b.left, 0);
    EXPECT_LE(b.top + b.h, 40);
    EXPECT_LE(b.left + b.w, 30);
    // area within the scale range (rounding of each side by up to 0.5 pixel)
    const double area = static_cast<double>(b.h * b.w) / 1200.0;
    EXPECT_GE(area, 0.02 * 0.5) << b.h << "x" << b.w;
    EXPECT_LE(area, 0.33 * 1.5) << b.h << "x" << b.w;
  }
  EXPECT_GT(erased, 1900);  // with p = 1 almost every sample finds a box within 10 tries
  o.p = 0.0;
  for (uint64_t k = 0; k < 100; ++k) {
    SampleRng rng(k);
    EXPECT_EQ(RandomErasing(o).choose({40, 30, 3}, rng).h, 0);
  }
  o.p = 0.25;
  int hits = 0;
  for (uint64_t k = 0; k < 4000; ++k) {
    SampleRng rng(SampleRng::sample_key(3, 0, k));
    hits += RandomErasing(o).choose({40, 30, 1}, rng).h > 0;
  }
  EXPECT_NEAR(hits, 1000, 120);
}

TEST(RandomErasing, FillsTheBoxOnlyWithValueOrRandomBytes) {
  for (bool random : {false, true}) {
    RandomErasingOptions o;
    o.p = 1.0;
    o.value = 7;
    o.random = random;
    RandomErasing re(o);
    Image img = make_image(32, 32, 3, 1), before = img, scratch;
    const uint64_t key = 11;
    SampleRng r1(key), r2(key);
    const CropBox b = re.choose(img.shape(), r1);
    ASSERT_GT(b.h * b.w, 0);
    re.apply(img, r2, scratch);
    std::set<int> inside;
    for (int64_t y = 0; y < 32; ++y)
      for (int64_t x = 0; x < 32; ++x)
        for (int64_t k = 0; k < 3; ++k) {
          const bool in = y >= b.top && y < b.top + b.h && x >= b.left && x < b.left + b.w;
          if (!in) EXPECT_EQ(img.at(y, x, k), before.at(y, x, k));
          else inside.insert(img.at(y, x, k));
        }
    if (!random) EXPECT_EQ(inside, (std::set<int>{7}));
    else EXPECT_GT(inside.size(), 20u);
  }
}

TEST(AutoAugmentOptions, JsonRoundTripAndRegistry) {
  Pipeline p = Pipeline::from_json(Json::parse(R"([
    {"type": "trivial_augment_wide", "num_magnitude_bins": 11, "fill": [1, 2, 3]},
    {"type": "rand_augment", "num_ops": 1, "magnitude": 4, "num_magnitude_bins": 5, "fill": 9},
    {"type": "random_erasing", "p": 0.3, "scale": [0.1, 0.2], "ratio": [0.5, 2], "value": "random"}])"));
  const Json j = p.to_json();
  EXPECT_EQ(j[0], Json::parse(R"({"type": "trivial_augment_wide", "num_magnitude_bins": 11, "fill": [1, 2, 3]})"));
  EXPECT_EQ(j[1], Json::parse(
                      R"({"type": "rand_augment", "num_ops": 1, "magnitude": 4, "num_magnitude_bins": 5, "fill": 9})"));
  EXPECT_EQ(j[2]["value"], "random");
  EXPECT_EQ(Pipeline::from_json(j).to_json(), j);
  EXPECT_EQ(p.output_shape({30, 30, 3}), (ImageShape{30, 30, 3}));
  // defaults as torchvision's
  EXPECT_EQ(RandAugmentOptions::from_json(Json::object()).to_json(),
            Json::parse(R"({"num_ops": 2, "magnitude": 9, "num_magnitude_bins": 31, "fill": 0})"));
  EXPECT_EQ(RandomErasingOptions::from_json(Json::object()).to_json(),
            Json::parse(R"({"p": 0.5, "scale": [0.02, 0.33], "ratio": [0.3, 3.3], "value": 0})"));
}

TEST(AutoAugmentOptions, BadOptionsNameThePathAndWhatIsAccepted) {
  // {step, parts its error must contain}; the step is item 0 of data.train_transforms.
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"({"type": "rand_augment", "num_ops": -1})", {"data.train_transforms[0].num_ops", ">= 0"}},
      {R"({"type": "rand_augment", "magnitude": 31})", {"data.train_transforms[0].magnitude", "[0, 30]"}},
      {R"({"type": "rand_augment", "magnitude": -1})", {"[0, 30]"}},
      {R"({"type": "rand_augment", "magnitude": 3, "num_magnitude_bins": 1})", {"num_magnitude_bins", ">= 2"}},
      {R"({"type": "trivial_augment_wide", "num_magnitude_bins": 0})", {"num_magnitude_bins", ">= 2"}},
      {R"({"type": "trivial_augment_wide", "fill": 256})", {"data.train_transforms[0].fill", "0..255"}},
      {R"({"type": "trivial_augment_wide", "fill": [1, 2]})", {"1 or 3 values"}},
      {R"({"type": "trivial_augment_wide", "bins": 31})", {"bins"}},
      {R"({"type": "random_erasing", "p": 1.5})", {"data.train_transforms[0].p", "[0, 1]"}},
      {R"({"type": "random_erasing", "p": -0.1})", {"data.train_transforms[0].p", "[0, 1]"}},
      {R"({"type": "random_erasing", "scale": [0.4, 0.2]})", {"data.train_transforms[0].scale", "increasing pair"}},
      {R"({"type": "random_erasing", "scale": [0.1, 1.5]})", {"hi <= 1"}},
      {R"({"type": "random_erasing", "ratio": [3.3, 0.3]})", {"data.train_transforms[0].ratio", "increasing pair"}},
      {R"({"type": "random_erasing", "ratio": [0, 1]})", {"0 < lo"}},
      {R"({"type": "random_erasing", "ratio": [1, 2, 3]})", {"pair", "3 values"}},
      {R"({"type": "random_erasing", "value": "noise"})", {"data.train_transforms[0].value", "\"random\""}},
      {R"({"type": "random_erasing", "value": 300})", {"0..255"}},
  };
  for (const auto& [step, parts] : cases) {
    const std::string m =
        error_of([&s = step] { Pipeline::from_json(Json::array({Json::parse(s)}), "data.train_transforms"); });
    for (const auto& part : parts) EXPECT_HAS(m, part) << " for " << step;
  }
  std::string m;
  // channels: 1 or 3; a per-channel fill must match
  Pipeline p = Pipeline::from_json(Json::parse(R"([{"type": "rand_augment", "fill": [1, 2, 3]}])"), "t");
  m = error_of([&] { p.output_shape({8, 8, 1}); });
  EXPECT_HAS(m, "t[0]");
  EXPECT_HAS(m, "one per channel");
  m = error_of([&] { Pipeline::from_json(Json::parse(R"([{"type": "trivial_augment_wide"}])")).output_shape({8, 8, 4}); });
  EXPECT_HAS(m, "1-channel");
}
