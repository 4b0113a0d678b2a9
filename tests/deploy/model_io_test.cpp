// load_model (tools/deploy/model_io.h): config + weights file -> the trained model, in eval mode, giving the
// same outputs as the model the weights came from.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../expect_error.h"
#include "core/autograd.h"
#include "core/io/safetensors.h"
#include "core/rng.h"
#include "layers/interop.h"
#include "models/registry.h"
#include "tools/deploy/model_io.h"

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

// eval, predict and export resolve RUN|CONFIG here: one rule, one wording.
TEST(ResolveRunOrConfig, RunFolderConfigFileAndFolderWithoutConfig) {
  namespace fs = std::filesystem;
  const fs::path dir = temp_file("run");
  fs::create_directories(dir);
  // A folder without config.json is refused, naming the command and the folder.
  kiln::testing::expect_error([&] { resolve_run_or_config("kiln predict", dir.string()); },
                              {"kiln predict: '" + dir.string() + "' is a folder without config.json, not a run folder",
                               "accepted: a run folder (runs/<name>) or a config file"});
  EXPECT_FALSE(is_run_folder(dir.string()));
  // With the config.json training writes first, it is a run (metrics.csv or checkpoints not needed).
  std::ofstream(dir / "config.json") << tiny_config().dump();
  EXPECT_TRUE(is_run_folder(dir.string()));
  RunOrConfig r = resolve_run_or_config("kiln eval", dir.string());
  EXPECT_TRUE(r.is_run());
  EXPECT_EQ(r.run_dir, dir.string());
  EXPECT_EQ(r.config_file, (dir / "config.json").string());
  // A file is a config file, whatever its name; a missing path is left to load_config_file to name.
  r = resolve_run_or_config("kiln export", (dir / "config.json").string());
  EXPECT_FALSE(r.is_run());
  EXPECT_EQ(r.config_file, (dir / "config.json").string());
  EXPECT_FALSE(is_run_folder((dir / "config.json").string()));
  EXPECT_EQ(resolve_run_or_config("kiln export", (dir / "none.json").string()).config_file, (dir / "none.json").string());
  fs::remove_all(dir);
}

// init=random (kiln export): the initial weights of train.seed, the same every time.
TEST(InitialModel, SeededByTrainSeed) {
  json c = tiny_config();
  c["train"] = {{"seed", 3}};
  Tensor x = Tensor::ones({1, 6, 6, 1});
  NoGradGuard ng;
  std::vector<float> a = initial_model(c)->forward(x).to_float_vector();
  EXPECT_EQ(a, initial_model(c)->forward(x).to_float_vector());
  c["train"]["seed"] = 4;
  EXPECT_NE(a, initial_model(c)->forward(x).to_float_vector());
  c["train"]["seed"] = "x";
  kiln::testing::expect_error([&] { initial_model(c); }, {"train.seed", "an integer"});
}

}  // namespace
}  // namespace kiln
