// Transform output bound (kiln issue #35): a valid PNG of extreme aspect ratio (1 x 5,000,000)
// through the ImageNet val pipeline (resize(256) would ask for 256 x 1.28 G pixels, ~983 GB as
// RGB) is refused fast, naming the file and the limit, at the header (DecodeOptions::transforms)
// and, for a source that does not check headers, by the step itself before it allocates
// (checked_output_size, data/transform.h). The train pipeline's random_resized_crop has a fixed
// output and takes the same file without a large allocation; its size is bounded too.
// Sizes are computed in double: paddings and sizes near 2^62 give errors, not wrapped products.
#include <chrono>
#include <gtest/gtest.h>

#include "data/augment.h"
#include "data/config.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/pipeline.h"
#include "data/resize.h"
#include "data_test_util.h"
#include "image_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;

namespace {

constexpr uint32_t kWide = 5000000;  // 1 x 5,000,000: resize(256) -> 1,280,000,000 x 256

const char* kImageNetTransforms = R"(
    "train_transforms": [{"type": "random_resized_crop", "size": 224}, {"type": "horizontal_flip"},
                         {"type": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
    "val_transforms": [{"type": "resize", "size": 256}, {"type": "center_crop", "size": 224},
                       {"type": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}])";

DataConfig imagenet_config(const std::string& root) {
  return DataConfig::from_json(Json::parse(R"({"source": "image_folder", "root": ")" + root + R"(",)" +
                                           kImageNetTransforms + R"(, "batch_size": 2, "workers": 1, "shuffle": false})"));
}

// root/{train,val}/a/: one ordinary 40x30 image and the 1 x 5,000,000 one.
std::string write_extreme_folder(kt::TempDir& dir) {
  const auto wide = kt::grey_png(kWide, 1);
  for (const char* split : {"train", "val"}) {
    kt::write_bytes(dir.file(std::string(split) + "/a/0.png"), kt::encode(kt::pattern_rgb(30, 40, 1), ".png"));
    kt::write_bytes(dir.file(std::string(split) + "/a/1_wide.png"), wide);
  }
  return dir.str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs one epoch of `l`, returning the error (empty when none).
std::string epoch_error(DataLoader& l) {
  return kt::error_of([&] {
    l.start_epoch(0);
    Batch b;
    while (l.next(b)) {
    }
  });
}

}  // namespace

TEST(TransformBound, ExtremePngThroughTheValPipelineFailsFastNamingTheFile) {
  kt::TempDir dir;
  const DataConfig c = imagenet_config(write_extreme_folder(dir));
  auto l = make_loader(c, Split::val);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = epoch_error(*l);
  const double s = seconds_since(t0);
  EXPECT_LT(s, 1.0) << e;
  EXPECT_HAS(e, dir.file("val/a/1_wide.png") + ": PNG image of 5000000x1 (width x height) refused before decoding");
  EXPECT_HAS(e, "data.val_transforms[0]: resize: a 5000000x1 image (width x height) would become 1280000000x256");
  EXPECT_HAS(e, "over the limit of 89478485 pixels a transform may produce");
  EXPECT_HAS(e, "sample 1 of image_folder val");  // the loader's index and dataset
}

TEST(TransformBound, StepsBoundThemselvesWhenTheHeaderIsNotChecked) {
  // The safety net: a source whose decode options carry no transforms (or a source without files)
  // still fails fast in the step, naming it and the limit, before the output is allocated.
  kt::TempDir dir;
  const DataConfig c = imagenet_config(write_extreme_folder(dir));
  auto ds = ImageFileDataset::open_folder(dir.file("val"), DecodeOptions{}, "raw val");
  LoaderOptions o;
  o.batch_size = 2;
  o.shuffle = false;
  o.workers = 1;
  DataLoader l(ds, c.val_transforms, o);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = epoch_error(l);
  EXPECT_LT(seconds_since(t0), 1.0) << e;
  EXPECT_HAS(e, "sample 1 of raw val");
  EXPECT_HAS(e, "data.val_transforms[0]: resize: a 5000000x1 image (width x height) would become 1280000000x256 = "
                "327680000000 pixels, over the limit of 89478485");
}

TEST(TransformBound, TheTrainPipelineTakesTheSameFileWithoutALargeAllocation) {
  // random_resized_crop's output is size x size whatever the input: the 1 x 5,000,000 image gives
  // a 224x224 crop (the fallback box, 1x1, stretched), fast.
  kt::TempDir dir;
  const DataConfig c = imagenet_config(write_extreme_folder(dir));
  auto l = make_loader(c, Split::train);
  const auto t0 = std::chrono::steady_clock::now();
  l->start_epoch(0);
  Batch b;
  int64_t n = 0;
  while (l->next(b)) n += b.size();
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(n, 2);
  // Its size is bounded as well: in the config (the shape is known to be size x size) and in the
  // step before it allocates.
  Json j = Json::parse(R"({"source": "image_folder", "root": "r", "val_transforms": [{"type": "center_crop", "size": 8}],
    "train_transforms": [{"type": "random_resized_crop", "size": 10000}]})");
  EXPECT_HAS(kt::error_of([&] { DataConfig::from_json(j); }),
             "random_resized_crop: a ?x? image (width x height) would become 10000x10000 = 100000000 pixels, over the "
             "limit of 89478485");
  RandomResizedCropOptions big;
  big.size = 10000;
  Image img;
  img.resize(30, 40, 3);
  Image scratch;
  SampleRng rng(1);
  EXPECT_HAS(kt::error_of([&] { RandomResizedCrop(big).apply(img, rng, scratch); }),
             "a 40x30 image (width x height) would become 10000x10000");
  EXPECT_EQ(scratch.bytes.size(), 0u) << "nothing allocated for the refused output";
}

TEST(TransformBound, TheHeaderCheckDecodesNothing) {
  const auto wide = kt::grey_png(kWide, 1);
  DecodeOptions o;
  o.transforms = std::make_shared<const Pipeline>(imagenet_config("r").val_transforms);
  Image img;
  img.resize(4, 4, 3);
  const std::string e = kt::error_of([&] { decode_image(wide.data(), wide.size(), "/d/wide.png", o, img); });
  EXPECT_HAS(e, "/d/wide.png: PNG image of 5000000x1 (width x height) refused before decoding: "
                "data.val_transforms[0]: resize:");
  EXPECT_EQ(img.numel(), 0);
  // The same pipeline takes an ordinary image, and the same file without transforms decodes.
  const auto ok = kt::encode(kt::pattern_rgb(300, 400, 2), ".png");
  decode_image(ok.data(), ok.size(), "ok.png", o, img);
  EXPECT_EQ(img.shape(), (ImageShape{300, 400, 3}));
  decode_image(wide.data(), wide.size(), "/d/wide.png", DecodeOptions{}, img);
  EXPECT_EQ(img.shape(), (ImageShape{1, kWide, 3}));
}

TEST(TransformBound, EveryStepBoundsItsOutput) {
  // resize: up to the limit, or no larger than the input; beyond, refused (no int64 overflow).
  const Resize r256(ResizeOptions{256});
  EXPECT_EQ(r256.output_size(375, 500), (std::pair<int64_t, int64_t>{256, 341}));
  EXPECT_HAS(kt::error_of([&] { r256.output_size(1, 50000000); }),
             "resize: a 50000000x1 image (width x height) would become 12800000000x256");
  const Resize r9999(ResizeOptions{9999});
  EXPECT_EQ(r9999.output_shape({10000, 10000, 3}), (ImageShape{9999, 9999, 3}));  // over 89478485, but smaller
  const Resize huge(ResizeOptions{int64_t{1} << 40});
  EXPECT_HAS(kt::error_of([&] { huge.output_size(1, int64_t{1} << 40); }), "over the limit of 89478485");
  // center_crop pads up to its size: bounded by the limit however small the input.
  EXPECT_HAS(kt::error_of([&] { CenterCrop(CenterCropOptions{10000}).output_shape({8, 8, 3}); }),
             "center_crop: a 8x8 image (width x height) would become 10000x10000");
  EXPECT_EQ(CenterCrop(CenterCropOptions{224}).output_shape({8, 8, 3}), (ImageShape{224, 224, 3}));
  // random_crop: its output, and a padding whose padded side would wrap int64 or OpenCV's int.
  RandomCropOptions rc;
  rc.size = 10000;
  EXPECT_HAS(kt::error_of([&] { RandomCrop(rc).output_shape({28, 28, 1}); }), "random_crop: a 28x28 image");
  rc.size = 28;
  rc.padding = int64_t{1} << 62;
  const std::string e = kt::error_of([&] { RandomCrop(rc).output_shape({28, 28, 1}); });
  EXPECT_HAS(e, "random_crop: a 28x28x1 image padded by 4611686018427387904 has a side over OpenCV's limit");
  rc.padding = 4;
  EXPECT_EQ(RandomCrop(rc).output_shape({28, 28, 1}), (ImageShape{28, 28, 1}));
  // The pipeline names the step of the config list; a source of known size is refused at config time.
  Json j = Json::parse(R"({"source": "synthetic", "synthetic": {"height": 28, "width": 28, "channels": 1},
    "train_transforms": [{"type": "resize", "size": 20000}], "val_transforms": []})");
  EXPECT_HAS(kt::error_of([&] { DataConfig::from_json(j); }),
             "data.train_transforms[0]: resize: a 28x28 image (width x height) would become 20000x20000");
}
