// Scaled region decoding (data/image_decode.h: scale_box, region_scale, decode_jpeg_region at m/8)
// and the loader's sizing (workers / prefetch "auto", data/loader.h):
//   - the scale rule: the smallest m/8 that keeps the crop's output size, the box edges rounded;
//   - a scaled region holds exactly the pixels of the whole image decoded at the same scale, for
//     colour 4:2:0 and grey, baseline and progressive, boxes at every iMCU alignment and the edges;
//   - on a real photo (tests/data/photos/chelsea.jpg: scikit-image's "chelsea", CC0, 451x300,
//     JPEG quality 90) random_resized_crop's output from a scaled region is close to the full-scale
//     one: mean absolute difference < 6 levels of 255 and PSNR > 30 dB for every box tried;
//   - the loader with fast_decode on and off: same shapes, close pixels; PNGs, CMYK JPEGs and
//     images smaller than the crop give identical batches (they never take the scaled path);
//   - workers = "auto" is the affinity mask's CPUs minus one (at least 1), recorded as a number;
//     prefetch "auto" is workers + 2, and the loader allocates no more than prefetch + 1 batches.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <filesystem>

#include "data/config.h"
#include "data/file_io.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/resize.h"
#include "data_test_util.h"
#include "image_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;

namespace {

ImageHeader header(const std::vector<uint8_t>& b) { return read_image_header(b.data(), b.size(), "mem"); }

std::vector<uint8_t> photo() {
  std::vector<uint8_t> b;
  read_regular_file(std::string(KILN_TEST_DATA) + "/photos/chelsea.jpg", b);
  return b;
}

struct Diff {
  double mean_abs = 0, psnr = 0;
  int max_abs = 0;
};
Diff compare(const Image& a, const Image& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double sum = 0, sq = 0;
  Diff d;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const int e = std::abs(int{a.bytes[i]} - int{b.bytes[i]});
    sum += e;
    sq += double(e) * e;
    d.max_abs = std::max(d.max_abs, e);
  }
  d.mean_abs = sum / static_cast<double>(a.numel());
  const double mse = sq / static_cast<double>(a.numel());
  d.psnr = mse > 0 ? 10 * std::log10(255.0 * 255.0 / mse) : 99.0;
  return d;
}

// random_resized_crop's output for `box` resized to out x out, from a region decoded at m/8.
Image crop_output(const std::vector<uint8_t>& jpg, const CropBox& box, int m, int64_t out) {
  Image region, result;
  CropBox got;
  EXPECT_TRUE(decode_jpeg_region(jpg.data(), jpg.size(), "p.jpg", {}, header(jpg), box, region, got, m));
  if (m < 8) {
    EXPECT_GE(got.h, out);
    EXPECT_GE(got.w, out);
  }
  resize_image(region, got, out, out, "auto", result);
  return result;
}

}  // namespace

TEST(ScaledRegion, ScaleRuleKeepsTheOutputSize) {
  // Edges round half up in eighths: 3 * 4 / 8 = 1.5 -> 2, 13 * 4 / 8 = 6.5 -> 7.
  EXPECT_EQ(scale_box({3, 5, 10, 10}, 4), (CropBox{2, 3, 5, 5}));
  EXPECT_EQ(scale_box({3, 5, 10, 10}, 8), (CropBox{3, 5, 10, 10}));
  EXPECT_EQ(region_scale({0, 0, 400, 400}, 224, 224), 5);  // 4/8 gives 200 < 224, 5/8 gives 250
  EXPECT_EQ(region_scale({0, 0, 448, 448}, 224, 224), 4);  // exactly 224: a copy, no upscale
  EXPECT_EQ(region_scale({0, 0, 2000, 1800}, 224, 224), 1);
  EXPECT_EQ(region_scale({0, 0, 300, 250}, 224, 224), 8);  // 7/8 of 250 = 219 < 224: full scale
  EXPECT_EQ(region_scale({0, 0, 100, 100}, 224, 224), 8);  // an upscale stays at full scale
  EXPECT_EQ(region_scale({0, 0, 400, 400}, 0, 0), 8);      // no output size given
  // Wherever the box lies, the scaled box keeps the output size and the full scale is never chosen
  // when a smaller one suffices.
  for (int64_t top = 0; top < 16; ++top)
    for (int64_t side = 224; side < 700; side += 37) {
      const CropBox b{top, top + 3, side, side + 11};
      const int m = region_scale(b, 224, 224);
      const CropBox s = scale_box(b, m);
      EXPECT_GE(s.h, 224);
      EXPECT_GE(s.w, 224);
      if (m > 1) {
        const CropBox smaller = scale_box(b, m - 1);
        EXPECT_TRUE(smaller.h < 224 || smaller.w < 224) << side << " " << m;
      }
    }
}

TEST(ScaledRegion, EqualsTheWholeImageDecodedAtThatScale) {
  const kt::Pixels colour = kt::pattern_rgb(61, 77, 5);
  for (int grey : {0, 1})
    for (int progressive : {0, 1}) {
      const auto jpg = kt::encode(grey ? kt::to_grey(colour) : colour, ".jpg", {progressive == 1});
      const ImageHeader h = header(jpg);
      for (int64_t channels : {3, 1}) {
        DecodeOptions o;
        o.channels = channels;
        for (int m = 1; m < 8; ++m) {
          Image whole, part;
          CropBox wgot, got;
          ASSERT_TRUE(decode_jpeg_region(jpg.data(), jpg.size(), "f.jpg", o, h, {0, 0, 61, 77}, whole, wgot, m));
          const CropBox all = scale_box({0, 0, 61, 77}, m);  // the rows and columns of whole pixels
          ASSERT_EQ(whole.h, all.h);  // the box's rows; the columns are libjpeg's (ceil)
          ASSERT_EQ(whole.w, (77 * m + 7) / 8);
          ASSERT_EQ(wgot, all);
          std::vector<CropBox> boxes = {{60, 76, 1, 1}, {0, 0, 61, 77}, {40, 50, 21, 27}};  // corner, all, bottom right
          for (int64_t top = 0; top < 61; top += 5)  // every alignment of the box to the scaled iMCU grid
            for (int64_t left = 0; left < 77; left += 7)
              for (auto [bh, bw] : {std::pair<int64_t, int64_t>{9, 30}, {17, 13}, {40, 40}})
                if (top + bh <= 61 && left + bw <= 77) boxes.push_back({top, left, bh, bw});
          for (const CropBox& want : boxes) {
            const CropBox s = scale_box(want, m);
            if (s.h <= 0 || s.w <= 0 || s.top + s.h > all.h || s.left + s.w > all.w) continue;  // no whole pixel
            ASSERT_TRUE(decode_jpeg_region(jpg.data(), jpg.size(), "f.jpg", o, h, want, part, got, m));
            ASSERT_EQ(got.h, s.h);
            ASSERT_EQ(got.w, s.w);
            ASSERT_LE(got.left + got.w, part.w);
            ASSERT_LE(got.top + got.h, part.h);
            int max_diff = 0;
            for (int64_t y = 0; y < s.h; ++y)
              for (int64_t x = 0; x < s.w; ++x)
                for (int64_t c = 0; c < channels; ++c)
                  max_diff = std::max(max_diff, std::abs(part.at(got.top + y, got.left + x, c) - whole.at(s.top + y, s.left + x, c)));
            EXPECT_EQ(max_diff, 0) << "grey " << grey << " progressive " << progressive << " channels " << channels
                                   << " m " << m << " box " << want.top << "," << want.left << " " << want.h << "x" << want.w;
          }
        }
      }
    }
}

// The accuracy cost on a real photo: the crop's output from the scaled region against the one from
// the full-scale region, for boxes in the middle, at each edge and corner, and the whole image.
TEST(ScaledRegion, CloseToTheFullScaleCropOnAPhoto) {
  const auto jpg = photo();
  const ImageHeader h = header(jpg);
  ASSERT_EQ(h.width, 451);
  ASSERT_EQ(h.height, 300);
  int scaled = 0;
  for (int64_t out : {224, 160, 112, 64})
    for (const CropBox& box : std::vector<CropBox>{{0, 0, 300, 451},     // whole image
                                                   {10, 60, 280, 280},   // middle
                                                   {0, 0, 256, 300},     // top left corner
                                                   {44, 151, 256, 300},  // bottom right corner, to the last pixel
                                                   {0, 200, 300, 251},   // right edge, full height
                                                   {33, 17, 239, 377},
                                                   {16, 64, 280, 280}}) {  // edges on the 8-pixel grid: no rounding
      const int m = region_scale(box, out, out);
      if (m == 8) continue;
      ++scaled;
      const Diff d = compare(crop_output(jpg, box, m, out), crop_output(jpg, box, 8, out));
      std::printf("box %lld,%lld %lldx%lld out %lld m %d: mean abs %.2f psnr %.1f dB\n", (long long)box.top,
                  (long long)box.left, (long long)box.h, (long long)box.w, (long long)out, m, d.mean_abs, d.psnr);
      EXPECT_LT(d.mean_abs, 6.0) << "box " << box.top << "," << box.left << " " << box.h << "x" << box.w << " out " << out << " m " << m;
      EXPECT_GT(d.psnr, 30.0) << "box " << box.top << "," << box.left << " " << box.h << "x" << box.w << " out " << out << " m " << m;
    }
  EXPECT_GE(scaled, 20);  // the rule did pick reduced scales (1/8 .. 7/8) for most of them
}

namespace {
DataConfig rrc_config(const std::string& root, int64_t size, bool fast) {
  return DataConfig::from_json(Json::parse(R"({"source": "image_folder", "root": ")" + root + R"(",
    "train_transforms": [{"type": "random_resized_crop", "size": )" + std::to_string(size) + R"(},
                         {"type": "horizontal_flip"}, {"type": "normalize", "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}],
    "val_transforms": [{"type": "center_crop", "size": 8}, {"type": "normalize", "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}],
    "batch_size": 4, "seed": 7, "workers": 2, "dtype": "u8", "fast_decode": )" + (fast ? "true" : "false") + "}"));
}

std::vector<Image> epoch(const DataConfig& c) {
  auto l = make_loader(c, Split::train);
  l->start_epoch(0);
  std::vector<Image> out;
  Batch b;
  while (l->next(b)) {
    const auto& s = b.images.shape();
    for (int64_t i = 0; i < b.size(); ++i) {
      Image img;
      img.resize(s[1], s[2], s[3]);
      std::memcpy(img.data(), static_cast<const uint8_t*>(b.images.raw_data()) + i * img.numel(), img.numel());
      out.push_back(img);
    }
  }
  return out;
}
}  // namespace

TEST(ScaledRegion, LoaderSwitchKeepsOtherPathsExact) {
  kt::TempDir dir;
  const auto jpg = photo();
  for (int i = 0; i < 4; ++i) kt::write_bytes(dir.file("train/cat/" + std::to_string(i) + ".jpg"), jpg);
  // Non-JPEG, CMYK and tiny images: never scaled, so the switch changes nothing for them.
  kt::write_bytes(dir.file("train/other/a.png"), kt::encode(kt::pattern_rgb(200, 150, 3), ".png"));
  kt::write_bytes(dir.file("train/other/b.jpg"), kt::cmyk_jpeg(220, 180, {30, 60, 90, 200}));
  kt::write_bytes(dir.file("train/other/c.jpg"), kt::encode(kt::pattern_rgb(5, 7, 4), ".jpg"));
  kt::write_bytes(dir.file("val/cat/0.png"), kt::encode(kt::pattern_rgb(9, 9, 1), ".png"));
  const std::vector<Image> fast = epoch(rrc_config(dir.str(), 64, true)), exact = epoch(rrc_config(dir.str(), 64, false));
  ASSERT_EQ(fast.size(), 7u);
  ASSERT_EQ(exact.size(), 7u);
  auto ds = make_dataset(rrc_config(dir.str(), 64, true), Split::train);
  int photos = 0;
  for (size_t k = 0; k < fast.size(); ++k) {
    ASSERT_EQ(fast[k].shape(), (ImageShape{64, 64, 3}));
    const Diff d = compare(fast[k], exact[k]);
    // Which sample this is: the batches keep the order, label 0 is "cat" (the photo).
    if (d.max_abs == 0) continue;
    ++photos;
    EXPECT_LT(d.mean_abs, 6.0) << k;
    EXPECT_GT(d.psnr, 30.0) << k;
  }
  EXPECT_GE(photos, 1);  // some photo crop took the scaled path
  EXPECT_LE(photos, 4);  // and none of the png, CMYK or tiny images did
}

TEST(LoaderSizing, WorkersAutoIsTheCoresMinusOne) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int64_t want = std::max<int64_t>(1, CPU_COUNT(&set) - 1);
  EXPECT_EQ(LoaderOptions::auto_workers(), std::min<int64_t>(want, 256));
  LoaderOptions o = LoaderOptions::from_json(Json::parse(R"({"workers": "auto", "prefetch": "auto"})"));
  EXPECT_EQ(o.workers, LoaderOptions::auto_workers());
  EXPECT_EQ(o.prefetch, o.workers + 2);
  // Recorded as numbers: a saved config reloads to the same loader.
  const Json j = o.to_json();
  EXPECT_EQ(j["workers"], o.workers);
  EXPECT_EQ(j["prefetch"], o.workers + 2);
  EXPECT_TRUE(j["fast_decode"].get<bool>());
  // Absent prefetch is "auto"; an explicit one is kept.
  EXPECT_EQ(LoaderOptions::from_json(Json::parse(R"({"workers": 7})")).prefetch, 9);
  EXPECT_EQ(LoaderOptions::from_json(Json::parse(R"({"workers": 7, "prefetch": 3})")).prefetch, 3);
  EXPECT_EQ(LoaderOptions::from_json(Json::parse(R"({"workers": 0})")).prefetch, 2);
  // Bad values name the key and what is accepted.
  EXPECT_HAS(kt::error_of([] { LoaderOptions::from_json(Json::parse(R"({"workers": "all"})")); }),
             "loader.workers must be an integer or \"auto\", not a string \"all\"");
  EXPECT_HAS(kt::error_of([] { LoaderOptions::from_json(Json::parse(R"({"workers": -1})")); }),
             "loader.workers: must be in [0, 256] or \"auto\", got -1");
  EXPECT_EQ(LoaderOptions::from_json(Json::parse(R"({"workers": 3, "prefetch": 0})")).prefetch, 5) << "0 is auto";
  // A number typed over "auto" on the command line arrives as text (tools/deploy/config.h keeps a
  // string key's text): read as the number, checked as one.
  EXPECT_EQ(LoaderOptions::from_json(Json::parse(R"({"workers": "3", "prefetch": "4"})")).workers, 3);
  EXPECT_EQ(LoaderOptions::from_json(Json::parse(R"({"workers": "3", "prefetch": "4"})")).prefetch, 4);
  EXPECT_HAS(kt::error_of([] { LoaderOptions::from_json(Json::parse(R"({"workers": "-1"})")); }),
             "loader.workers: must be in [0, 256] or \"auto\", got -1");
  EXPECT_HAS(kt::error_of([] { LoaderOptions::from_json(Json::parse(R"({"workers": "4x"})")); }),
             "loader.workers must be an integer or \"auto\", not a string \"4x\"");
  EXPECT_HAS(kt::error_of([] { LoaderOptions::from_json(Json::parse(R"({"prefetch": -1})")); }),
             "loader.prefetch: must be at least 1, or 0 or \"auto\" (workers + 2), got -1");
  EXPECT_HAS(kt::error_of([] { LoaderOptions::from_json(Json::parse(R"({"prefetch": "deep"})")); }),
             "loader.prefetch must be an integer or \"auto\"");
}

namespace {
// Counts the samples loaded.
class Counting : public Dataset {
 public:
  explicit Counting(std::shared_ptr<const Dataset> d) : d_(std::move(d)) {}
  int64_t size() const override { return d_->size(); }
  int64_t num_classes() const override { return d_->num_classes(); }
  ImageShape image_shape() const override { return d_->image_shape(); }
  std::string name() const override { return d_->name(); }
  void get_into(int64_t i, Sample& out) const override {
    ++loaded;
    d_->get_into(i, out);
  }
  mutable std::atomic<int64_t> loaded{0};

 private:
  std::shared_ptr<const Dataset> d_;
};
}  // namespace

// However long the consumer takes, the workers fill at most `prefetch` batches past the one it
// holds: the loader's batch memory is bounded by (prefetch + 1) x the batch's bytes.
TEST(LoaderSizing, PrefetchBoundsTheBatchesInFlight) {
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = 3;
  o.prefetch = 0;  // auto: 5
  auto ds = std::make_shared<Counting>(kt::small_synthetic(60));
  DataLoader l(ds, Pipeline(), o);
  EXPECT_EQ(l.options().prefetch, 5);
  l.start_epoch(0);
  Batch held;
  ASSERT_TRUE(l.next(held));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the workers run as far as they may
  EXPECT_EQ(ds->loaded.load(), (1 + 5) * 2);  // the held batch and 5 ahead, not the epoch's 30
  Batch b;
  ASSERT_TRUE(l.next(b));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(ds->loaded.load(), (2 + 5) * 2);  // one more delivered: one more filled
  l.stop();
}
