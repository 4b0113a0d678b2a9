// The loader's u8 batches (LoaderOptions::dtype "u8", data.upload): the pixels are the pipeline's
// output before its final normalize, the batch carries that normalize, and normalising them with
// ops::normalize_u8 gives the f32 loader's batches bit for bit (bf16: the bf16 loader's). The
// config's data.upload / data.dtype checks and how "auto" resolves.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include "core/check.h"
#include "core/ops/normalize_u8.h"
#include "data/augment.h"
#include "data/config.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "data_test_util.h"

using namespace kiln;

namespace {

using kiln::testing::augmenting_pipeline;
using kiln::testing::small_synthetic;

LoaderOptions opts(const std::string& dtype) {
  LoaderOptions o;
  o.batch_size = 6;
  o.workers = 2;
  o.prefetch = 3;
  o.seed = 9;
  o.dtype = dtype;
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

Json data_config(const std::string& extra) {
  return Json::parse(R"({"source": "synthetic", "synthetic": {"size": 16, "height": 6, "width": 6, "channels": 3},
    "train_transforms": [{"type": "horizontal_flip"}, {"type": "normalize", "mean": [0.5], "std": [0.25]}],
    "val_transforms": [{"type": "normalize", "mean": [0.5], "std": [0.25]}])" + extra + "}");
}

}  // namespace

// horizontal_flip's "alternate" mode through the loader: every image of the dataset comes mirrored
// in every other epoch, whatever order the shuffle gives it and however many workers load it.
TEST(LoaderU8, AlternateFlipMirrorsEachImageInEveryOtherEpoch) {
  auto ds = small_synthetic(20);
  const Pipeline p = Pipeline::from_json(Json::parse(R"([{"type": "horizontal_flip", "mode": "alternate"},
                                                          {"type": "normalize", "mean": [0.5], "std": [0.25]}])"));
  DataLoader l(ds, p, opts("u8"));
  std::map<int64_t, std::vector<bool>> mirrored;  // dataset index -> per epoch
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    l.start_epoch(epoch);
    Batch b;
    while (l.next(b)) {
      const int64_t per = b.images.numel() / b.size();
      const uint8_t* px = b.images.data<uint8_t>();
      for (int64_t k = 0; k < b.size(); ++k) {
        Sample s;
        ds->get_into(b.indices[k], s);
        const std::vector<uint8_t> got(px + k * per, px + (k + 1) * per);
        Image m = s.image;
        HorizontalFlip::flip(m);
        ASSERT_TRUE(got == s.image.bytes || got == m.bytes) << "sample " << b.indices[k];
        mirrored[b.indices[k]].push_back(got == m.bytes && got != s.image.bytes);
      }
    }
  }
  ASSERT_EQ(mirrored.size(), 20u);
  int first = 0;
  for (const auto& [idx, m] : mirrored) {
    ASSERT_EQ(m.size(), 4u) << idx;
    for (size_t e = 1; e < m.size(); ++e) EXPECT_NE(m[e], m[e - 1]) << "sample " << idx << ", epoch " << e;
    first += m[0];
  }
  EXPECT_GT(first, 0);
  EXPECT_LT(first, 20);
}

TEST(LoaderU8, PixelsAreThePipelineBeforeNormalizeAndCarryIt) {
  auto ds = small_synthetic(20);
  Pipeline p = augmenting_pipeline();
  DataLoader l(ds, p, opts("u8"));
  EXPECT_EQ(l.dtype(), DType::u8);
  l.start_epoch(4);
  Batch b;
  Pipeline::Workspace ws;
  int64_t seen = 0;
  while (l.next(b)) {
    ASSERT_EQ(b.images.shape(), (Shape{b.size(), 5, 5, 3}));
    ASSERT_EQ(b.images.dtype(), DType::u8);
    EXPECT_EQ(b.normalize.mean, (std::vector<double>{0.5, 0.4, 0.3}));
    EXPECT_EQ(b.normalize.std, (std::vector<double>{0.2, 0.25, 0.3}));
    const uint8_t* px = static_cast<const uint8_t*>(b.images.raw_data());
    for (int64_t i = 0; i < b.size(); ++i) {
      Sample s = ds->get(b.indices[i]);
      p.augment(s.image, SampleRng::sample_key(9, 4, static_cast<uint64_t>(b.indices[i])), ws);
      ASSERT_EQ(s.image.numel(), 75);
      for (int64_t k = 0; k < 75; ++k) ASSERT_EQ(px[i * 75 + k], s.image.data()[k]) << "sample " << b.indices[i] << " byte " << k;
      ++seen;
    }
  }
  EXPECT_EQ(seen, 20);
}

TEST(LoaderU8, NormalisedByTheOpTheyEqualTheFloatLoadersBatches) {
  auto ds = small_synthetic(20);
  for (const char* fdt : {"f32", "bf16"}) {
    DataLoader lu(ds, augmenting_pipeline(), opts("u8")), lf(ds, augmenting_pipeline(), opts(fdt));
    lu.start_epoch(2);
    lf.start_epoch(2);
    Batch bu, bf;
    int64_t batches = 0;
    while (lu.next(bu)) {
      ASSERT_TRUE(lf.next(bf));
      ASSERT_EQ(bu.indices, bf.indices);
      Tensor y = ops::normalize_u8(bu.images, bu.normalize.mean, bu.normalize.std, bf.images.dtype());
      ASSERT_EQ(y.shape(), bf.images.shape());
      EXPECT_EQ(y.to_double_vector(), bf.images.to_double_vector()) << fdt << " batch " << bu.index;
      ++batches;
    }
    EXPECT_FALSE(lf.next(bf));
    EXPECT_EQ(batches, 4);
  }
}

TEST(LoaderU8, WithoutAFinalNormalizeIsAClearError) {
  auto ds = small_synthetic(8);
  const std::string e = error_of([&] { DataLoader l(ds, Pipeline::from_json(Json::parse(R"([{"type": "horizontal_flip"}])")), opts("u8")); });
  EXPECT_NE(e.find("data.train_transforms / data.val_transforms"), std::string::npos) << e;
  EXPECT_NE(e.find("normalize"), std::string::npos) << e;
  const std::string d = error_of([] { LoaderOptions::from_json(Json::parse(R"({"dtype": "f16"})"), "data"); });
  EXPECT_NE(d.find("data.dtype"), std::string::npos) << d;
  EXPECT_NE(d.find("u8"), std::string::npos) << d;
  EXPECT_EQ(LoaderOptions::from_json(Json::parse(R"({"dtype": "u8"})"), "data").dtype, "u8");
}

TEST(LoaderU8, DataUploadIsCheckedAndResolved) {
  DataConfig c = DataConfig::from_json(data_config(""), "data");
  EXPECT_EQ(c.upload, "auto");
  EXPECT_TRUE(c.upload_u8(/*gpu=*/true, /*mixup=*/false));
  EXPECT_FALSE(c.upload_u8(false, false));  // the CPU: the pipeline's own normalize, in the workers
  EXPECT_FALSE(c.upload_u8(true, true));    // mixup mixes floats on the CPU
  EXPECT_EQ(c.to_json()["upload"], "auto");
  DataConfig u = DataConfig::from_json(data_config(R"(, "upload": "u8")"), "data");
  EXPECT_TRUE(u.upload_u8(false, false));
  EXPECT_NE(error_of([&] { u.upload_u8(true, true); }).find("train.mixup"), std::string::npos);
  DataConfig f = DataConfig::from_json(data_config(R"(, "upload": "float")"), "data");
  EXPECT_FALSE(f.upload_u8(true, false));
  // auto without a final normalize on a list falls back to float; "u8" is an error naming the list
  Json nv = data_config("");
  nv["val_transforms"] = Json::array();
  EXPECT_FALSE(DataConfig::from_json(nv, "data").upload_u8(true, false));
  nv["upload"] = "u8";
  const std::string e = error_of([&] { DataConfig::from_json(nv, "data"); });
  EXPECT_NE(e.find("data.val_transforms"), std::string::npos) << e;
  EXPECT_NE(e.find("does not end with one"), std::string::npos) << e;
  const std::string bad = error_of([] { DataConfig::from_json(data_config(R"(, "upload": "bytes")"), "data"); });
  EXPECT_NE(bad.find("data.upload"), std::string::npos) << bad;
  EXPECT_NE(bad.find("float"), std::string::npos) << bad;
  const std::string clash = error_of([] { DataConfig::from_json(data_config(R"(, "upload": "float", "dtype": "u8")"), "data"); });
  EXPECT_NE(clash.find("data.upload"), std::string::npos) << clash;
}
