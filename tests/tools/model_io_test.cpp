// load_model (tools/model_io.h): config + weights file -> the trained model, in eval mode, giving the
// same outputs as the model the weights came from.
#include <gtest/gtest.h>

#include <filesystem>

#include "../expect_error.h"
#include "core/autograd.h"
#include "core/io/safetensors.h"
#include "core/rng.h"
#include "layers/interop.h"
#include "models/registry.h"
#include "tools/model_io.h"

namespace kiln {
namespace {

json tiny_config() {
  return json::parse(R"({
    "model": {"layers": [{"type": "conv2d", "in_channels": 1, "out_channels": 3, "kernel_size": 3, "padding": 1},
                         {"type": "batch_norm2d", "num_features": 3}, {"type": "relu"},
                         {"type": "flatten"}, {"type": "linear", "in_features": 108, "out_features": 5}]},
    "data": {"source": "synthetic", "synthetic": {"height": 6, "width": 6, "channels": 1, "num_classes": 5}}
  })");
}

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_model_io_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(LoadModel, GivesTheOutputsOfTheModelTheWeightsCameFrom) {
  // A "trained" model: built from the same config, other initial weights and batch-norm statistics.
  Generator gen(7);
  Tensor x = rand_normal({2, 6, 6, 1}, 0.0, 1.0, DType::f32, Device::cpu(), &gen);
  std::shared_ptr<Module> trained = models::build_model(tiny_config()["model"]);
  trained->forward(x);  // training mode: moves the batch-norm running statistics off their defaults
  trained->eval();
  const std::string file = temp_file("w.safetensors");
  save_safetensors(file, export_pytorch_state_dict(*trained));

  std::shared_ptr<Module> loaded = load_model(tiny_config(), file);
  EXPECT_FALSE(loaded->is_training());
  NoGradGuard ng;
  Tensor want = trained->forward(x), got = loaded->forward(x);
  ASSERT_EQ(got.shape(), (Shape{2, 5}));
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_FLOAT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  std::filesystem::remove(file);
}

TEST(LoadModel, ErrorsNameTheWeightsFileOrTheConfigKey) {
  std::shared_ptr<Module> other = models::build_model(json::parse(
      R"({"layers": [{"type": "flatten"}, {"type": "linear", "in_features": 36, "out_features": 5}]})"));
  Tensor x = Tensor::zeros({1, 6, 6, 1});
  other->forward(x);
  const std::string file = temp_file("other.safetensors");
  save_safetensors(file, export_pytorch_state_dict(*other));
  kiln::testing::expect_error([&] { load_model(tiny_config(), file); }, {"other.safetensors", "do not fit the model"});
  std::filesystem::remove(file);

  json c = tiny_config();
  c["data"]["synthetic"]["channels"] = 3;  // the conv takes 1 channel
  kiln::testing::expect_error([&] { load_model(c, file); }, {"model.layers[0]"});
  kiln::testing::expect_error([&] { load_model(json::object({{"model", c["model"]}}), file); }, {"\"data\""});
}

}  // namespace
}  // namespace kiln
