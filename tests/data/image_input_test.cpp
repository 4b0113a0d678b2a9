// load_input_image (data/image_input.h): one file -> the (1, H, W, C) batch the model takes, through
// the config's validation transforms, as the loader would give it.
#include <gtest/gtest.h>

#include <cmath>

#include "data/config.h"
#include "data/image_encode.h"
#include "data/image_input.h"
#include "data_test_util.h"
#include "image_test_util.h"

namespace kiln {
namespace {

using testing::TempDir;

DataConfig config_of(const std::string& text) { return DataConfig::from_json(Json::parse(text), "data"); }

TEST(ImageInput, GreyImageIsNormalisedLikeTheLoader) {
  TempDir dir;
  testing::Pixels p = testing::to_grey(testing::pattern_rgb(8, 6, 3));
  write_file(dir.file("a.png"), encode_png(p.px.data(), p.h, p.w, 1));
  DataConfig dc = config_of(R"({"source": "synthetic", "synthetic": {"height": 8, "width": 6, "channels": 1},
                                "val_transforms": [{"type": "normalize", "mean": [0.5], "std": [0.25]}]})");
  Tensor x = load_input_image(dir.file("a.png"), dc);
  ASSERT_EQ(x.shape(), (Shape{1, 8, 6, 1}));
  ASSERT_EQ(x.dtype(), DType::f32);
  for (size_t i = 0; i < p.px.size(); ++i)
    EXPECT_NEAR(x.data<float>()[i], (p.px[i] / 255.0 - 0.5) / 0.25, 1e-5) << i;
}

TEST(ImageInput, ColourImageOfAFolderSourceIsCentreCropped) {
  TempDir dir;
  testing::Pixels p = testing::pattern_rgb(10, 12, 5);
  write_file(dir.file("b.png"), encode_png(p.px.data(), p.h, p.w, 3));
  DataConfig dc = config_of(R"({"source": "image_folder", "root": "unused",
                                "train_transforms": [{"type": "center_crop", "size": 4}],
                                "val_transforms": [{"type": "center_crop", "size": 4}]})");
  Tensor x = load_input_image(dir.file("b.png"), dc);
  ASSERT_EQ(x.shape(), (Shape{1, 4, 4, 3}));
  // centre crop of 10x12 to 4x4 starts at (3, 4); no normalize: pixels / 255
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t xx = 0; xx < 4; ++xx)
      for (int64_t c = 0; c < 3; ++c)
        EXPECT_NEAR(x.data<float>()[(y * 4 + xx) * 3 + c], p.px[((y + 3) * 12 + xx + 4) * 3 + c] / 255.0, 1e-6);
}

TEST(ImageInput, AnImageOfTheWrongSizeIsNamedWithBothShapes) {
  TempDir dir;
  testing::Pixels p = testing::to_grey(testing::pattern_rgb(9, 9, 1));
  write_file(dir.file("big.png"), encode_png(p.px.data(), p.h, p.w, 1));
  DataConfig dc = config_of(R"({"source": "fashion_mnist", "root": "unused"})");
  const std::string e = testing::error_of([&] { load_input_image(dir.file("big.png"), dc); });
  EXPECT_HAS(e, "big.png");
  EXPECT_HAS(e, "is 9x9");
  EXPECT_HAS(e, "takes 28x28");
  EXPECT_HAS(testing::error_of([&] { load_input_image(dir.file("none.png"), dc); }), "none.png");
}

}  // namespace
}  // namespace kiln
