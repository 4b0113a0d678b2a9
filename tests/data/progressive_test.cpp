// Progressive resizing (data/progressive.h): the size schedule, the config's errors, and the
// loader's batches (each image is the transforms' output resized to the epoch's size, the same for
// any worker count and for an epoch started directly, as a resumed run starts it).
#include <gtest/gtest.h>

#include "data/config.h"
#include "data/loader.h"
#include "data/resize.h"
#include "data/synthetic.h"
#include "data_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;

namespace {

ProgressiveResizeOptions schedule(const std::string& text) {
  return ProgressiveResizeOptions::from_json(Json::parse(text), "data.progressive_resize");
}

std::vector<int64_t> sizes(const ProgressiveResizeOptions& o, int64_t epochs, int64_t full) {
  std::vector<int64_t> s;
  for (int64_t e = 0; e < epochs; ++e) s.push_back(o.size_at(e, full));
  return s;
}

std::string schedule_error(const std::string& text) {
  return kt::error_of([&] { schedule(text); });
}

}  // namespace

TEST(ProgressiveResize, ScheduleByEpochCountedFromOne) {
  // The recipe's: epochs 1-10 at 20, 16 on at 28, in between 20 + 8 (k - 10) / 6 to a multiple of 4:
  // 21.3 -> 20, 22.7 -> 24, 24, 25.3 -> 24, 26.7 -> 28.
  auto o = schedule(R"({"min_size": 20, "start_epoch": 10, "end_epoch": 16, "step": 4})");
  EXPECT_EQ(sizes(o, 18, 28),
            (std::vector<int64_t>{20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 24, 24, 24, 28, 28, 28, 28}));
  // max_size given, step 1, no epoch at min_size: the exact interpolation, halves rounded up.
  o = schedule(R"({"min_size": 12, "max_size": 14, "start_epoch": 0, "end_epoch": 4})");
  EXPECT_EQ(sizes(o, 6, 28), (std::vector<int64_t>{13, 13, 14, 14, 14, 14}));  // 12.5, 13, 13.5, 14
  // Multiples of step outside [min, max] are clamped: 18 + ... to multiples of 8 gives 16 or 24.
  o = schedule(R"({"min_size": 18, "max_size": 22, "end_epoch": 3, "step": 8})");
  EXPECT_EQ(sizes(o, 4, 28), (std::vector<int64_t>{18, 22, 22, 22}));  // 19.3 -> 16 -> 18; 20.7 -> 24 -> 22
  // Off: the transforms' size throughout.
  EXPECT_EQ(ProgressiveResizeOptions{}.size_at(0, 28), 28);
  EXPECT_FALSE(ProgressiveResizeOptions{}.enabled());
  // Sizes never shrink from one epoch to the next (the smallest images come first, so a network
  // too small for them fails in the first epoch).
  o = schedule(R"({"min_size": 7, "max_size": 31, "start_epoch": 3, "end_epoch": 40, "step": 3})");
  for (int64_t e = 1; e < 50; ++e) EXPECT_GE(o.size_at(e, 32), o.size_at(e - 1, 32)) << e;
  // Large values stay exact (integer arithmetic).
  o = schedule(R"({"min_size": 1, "max_size": 65536, "start_epoch": 0, "end_epoch": 100001})");
  EXPECT_EQ(o.size_at(50000 - 1, 65536), 32768);  // 1 + 65535 * 50000 / 100001 = 32768.17
}

TEST(ProgressiveResize, ConfigErrorsNameTheKey) {
  EXPECT_HAS(schedule_error(R"({"end_epoch": 4})"), "data.progressive_resize.min_size: required");
  EXPECT_HAS(schedule_error(R"({"min_size": 20})"), "data.progressive_resize.end_epoch: required");
  EXPECT_HAS(schedule_error(R"({"min_size": 20, "start_epoch": 5, "end_epoch": 5})"),
             "data.progressive_resize.end_epoch: must be after start_epoch (5), got 5");
  EXPECT_HAS(schedule_error(R"({"min_size": 30, "max_size": 28, "end_epoch": 5})"),
             "data.progressive_resize.min_size: 30 is larger than max_size (28)");
  EXPECT_HAS(schedule_error(R"({"min_size": 0, "end_epoch": 5})"), "data.progressive_resize.min_size");
  EXPECT_HAS(schedule_error(R"({"min_size": 1e12, "end_epoch": 5})"), "data.progressive_resize.min_size");
  EXPECT_HAS(schedule_error(R"({"min_size": 20, "end_epoch": 5, "step": 0})"), "data.progressive_resize.step");
  EXPECT_HAS(schedule_error(R"({"min_size": 20, "end_epoch": -1})"), "data.progressive_resize.end_epoch");
  EXPECT_HAS(schedule_error(R"({"min_size": 20, "end_epoch": 5, "interpolation": "cubic"})"),
             "data.progressive_resize.interpolation");
  EXPECT_HAS(schedule_error(R"({"min_size": 20, "end_epoch": 5, "min_res": 3})"), "data.progressive_resize.min_res");
  EXPECT_HAS(schedule_error(R"({"min_size": "20", "end_epoch": 5})"), "data.progressive_resize.min_size");
  EXPECT_HAS(schedule_error(R"([20, 28])"), "data.progressive_resize");

  auto o = schedule(R"({"min_size": 20, "start_epoch": 10, "end_epoch": 16, "step": 4, "interpolation": "area"})");
  EXPECT_EQ(ProgressiveResizeOptions::from_json(o.to_json()).to_json(), o.to_json());
}

TEST(ProgressiveResize, DataConfigChecksTheTransformsOutput) {
  auto config = [](const std::string& progressive, const std::string& crop) {
    return Json::parse(R"({"source": "synthetic", "synthetic": {"size": 10, "height": 12, "width": 10},
                           "train_transforms": [)" + crop + R"(], "progressive_resize": )" + progressive + "}");
  };
  const std::string square = R"({"type": "center_crop", "size": 10})";
  DataConfig c = DataConfig::from_json(config(R"({"min_size": 6, "end_epoch": 3})", square));
  EXPECT_TRUE(c.progressive_resize.enabled());
  EXPECT_EQ(DataConfig::from_json(c.to_json()).to_json(), c.to_json());
  EXPECT_EQ(c.to_json()["progressive_resize"]["min_size"], 6);
  c.progressive_resize = {};
  EXPECT_EQ(c.to_json().dump().find("progressive_resize"), std::string::npos);

  std::string m = kt::error_of([&] { DataConfig::from_json(config(R"({"min_size": 6, "max_size": 11, "end_epoch": 3})", square)); });
  EXPECT_HAS(m, "data.progressive_resize.max_size: 11 is larger than the 10x10 images the train_transforms give");
  m = kt::error_of([&] { DataConfig::from_json(config(R"({"min_size": 11, "end_epoch": 3})", square)); });
  EXPECT_HAS(m, "data.progressive_resize.min_size: 11 is larger than the final size 10");
  m = kt::error_of([&] { DataConfig::from_json(config(R"({"min_size": 6, "end_epoch": 3})", "")); });  // 12x10
  EXPECT_HAS(m, "data.progressive_resize: progressive resizing needs square training images");
  EXPECT_HAS(m, "12x10");
}

TEST(ProgressiveResize, LoaderBatchesAreTheTransformsOutputResized) {
  SyntheticOptions so;
  so.size = 23;
  so.height = so.width = 12;
  so.channels = 3;
  so.num_classes = 5;
  auto ds = std::make_shared<SyntheticDataset>(so);
  Pipeline p = Pipeline::from_json(Json::parse(R"([{"type": "random_crop", "size": 12, "padding": 2},
      {"type": "horizontal_flip"}, {"type": "normalize", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3]}])"));
  auto o = schedule(R"({"min_size": 6, "start_epoch": 1, "end_epoch": 3, "step": 2})");  // 6, 9 -> 10, 12
  const std::vector<int64_t> want_side = {6, 10, 12, 12};

  auto run = [&](int64_t workers, const std::vector<int64_t>& epochs) -> std::vector<std::vector<float>> {
    LoaderOptions lo;
    lo.batch_size = 5;
    lo.workers = workers;
    lo.seed = 4;
    DataLoader l(ds, p, lo);
    l.set_progressive_resize(o);
    std::vector<std::vector<float>> out;
    for (int64_t e : epochs) {
      EXPECT_EQ(l.epoch_image_shape(e), (ImageShape{want_side[e], want_side[e], 3}));
      l.start_epoch(e);
      Batch b;
      Pipeline::Workspace ws;
      Image small;
      while (l.next(b)) {
        const int64_t s = want_side[e], per = s * s * 3;
        EXPECT_EQ(b.images.shape(), (Shape{b.size(), s, s, 3})) << "epoch " << e;
        std::vector<float> got = b.images.to_float_vector();
        for (int64_t i = 0; i < b.size(); ++i) {  // the transforms' 12x12 output, then resized
          Sample smp = ds->get(b.indices[i]);
          p.augment(smp.image, SampleRng::sample_key(4, e, static_cast<uint64_t>(b.indices[i])), ws);
          resize_image(smp.image, CropBox{0, 0, 12, 12}, s, s, "auto", small);
          std::vector<float> want(per);
          p.write(s == 12 ? smp.image : small, want.data(), DType::f32);
          EXPECT_EQ(std::vector<float>(got.begin() + i * per, got.begin() + (i + 1) * per), want)
              << "epoch " << e << " sample " << i;
        }
        out.push_back(std::move(got));
      }
    }
    return out;
  };
  const auto sequence = run(2, {0, 1, 2, 3});
  EXPECT_EQ(run(0, {0, 1, 2, 3}), sequence);  // any worker count
  auto resumed = run(3, {1, 2, 3});           // a run resumed at epoch 2 (index 1)
  const size_t per_epoch = 5;                 // ceil(23 / 5) batches
  EXPECT_EQ(resumed, std::vector<std::vector<float>>(sequence.begin() + per_epoch, sequence.end()));

  // A schedule that does not fit the loader's images is refused when set.
  LoaderOptions lo;
  DataLoader l(ds, p, lo);
  EXPECT_HAS(kt::error_of([&] { l.set_progressive_resize(schedule(R"({"min_size": 6, "max_size": 13, "end_epoch": 2})")); }),
             "data.progressive_resize.max_size: 13 is larger than the 12x12 images");
}
