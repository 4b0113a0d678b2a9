// data.upload (tools/engine/batch_images.h): a tiny CPU training run whose loaders deliver u8
// batches normalised by ops::normalize_u8 inside the step ends with the same weights, bit for bit,
// as the run whose loaders normalise on the CPU (f32: the op and data/normalize.cpp compute the same
// double expression rounded once; bf16 compute: both round that f32 value to nearest even), and
// evaluates to the same loss and accuracy (with flip TTA too).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/io/safetensors.h"
#include "tools/engine/batch_images.h"
#include "tools/engine/trainer.h"
#include "../tiny_net.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

json tiny_config(const std::string& runs, const std::string& name, const std::string& upload) {
  json c = json::parse(R"({
    "model": {},
    "data": {"source": "synthetic", "synthetic": {"size": 96, "height": 8, "width": 8, "channels": 3, "num_classes": 4},
             "train_transforms": [{"type": "horizontal_flip"},
                                  {"type": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
             "val_transforms": [{"type": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
             "batch_size": 16, "workers": 2},
    "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
    "train": {"epochs": 2, "seed": 3, "plots": false}
  })");
  c["model"]["layers"] = kiln::testing::tiny_conv_layers();
  c["name"] = name;
  c["data"]["upload"] = upload;
  c["train"]["runs_dir"] = runs;
  return c;
}

}  // namespace

TEST(Upload, U8BatchesTrainToTheSameWeightsAsFloatBatches) {
  const std::string runs = ::testing::TempDir() + "kiln_upload";
  fs::remove_all(runs);
  for (const char* precision : {"fp32", "bf16"}) {
    json a = tiny_config(runs, std::string("float_") + precision, "float");
    json b = tiny_config(runs, std::string("u8_") + precision, "u8");
    a["train"]["precision"] = precision;
    b["train"]["precision"] = precision;
    if (std::string(precision) == "bf16") {  // flip TTA's evaluation normalises u8 batches on the host
      a["train"]["tta"] = "flip";
      b["train"]["tta"] = "flip";
    }
    TrainResult ra = train(a, /*quiet=*/true), rb = train(b, true);
    EXPECT_EQ(ra.steps, rb.steps);
    auto wa = load_safetensors(ra.run_dir + "/last.safetensors").tensors;
    auto wb = load_safetensors(rb.run_dir + "/last.safetensors").tensors;
    ASSERT_EQ(wa.size(), wb.size());
    for (auto& [name, t] : wa) EXPECT_EQ(t.to_double_vector(), wb.at(name).to_double_vector()) << precision << " " << name;
    EXPECT_EQ(ra.val_top1, rb.val_top1) << precision;
    EXPECT_EQ(ra.val_loss, rb.val_loss) << precision;
  }
}

TEST(Upload, DeviceImagesNormalisesU8AndCastsFloats) {
  Tensor bytes = Tensor::from_vector(std::vector<double>{0, 255, 128, 7, 64, 200}, {1, 1, 2, 3}, DType::f64).to(DType::u8);
  NormalizeOptions n;
  n.mean = {0.5};
  n.std = {0.25};
  Tensor y = device_images(bytes, n, Device::cpu(), DType::f32);
  ASSERT_EQ(y.dtype(), DType::f32);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 2, 3}));
  EXPECT_EQ(y.data<float>()[1], static_cast<float>((255 / 255.0 - 0.5) / 0.25));
  Tensor f = Tensor::from_vector(std::vector<float>{1.5f, -2.f}, {1, 1, 1, 2});
  EXPECT_EQ(device_images(f, n, Device::cpu(), DType::bf16).to_double_vector(), (std::vector<double>{1.5, -2.0}));
  // the probe's u8 batch stays on the host for the step to upload
  Tensor p = probe_images(3, ImageShape{4, 4, 3}, true, Device::cpu(), DType::f32);
  EXPECT_EQ(p.dtype(), DType::u8);
  EXPECT_EQ(p.shape(), (Shape{3, 4, 4, 3}));
}
