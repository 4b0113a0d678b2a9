// `kiln export` (tools/cli/export_cmd.cpp): a run folder, a weights file, a run without weights,
// a reference from images, and the errors naming the argument. The exporter itself: tests/onnx/.
#include <gtest/gtest.h>

#include <cmath>

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../expect_error.h"
#include "core/autograd.h"
#include "core/io/safetensors.h"
#include "core/rng.h"
#include "data/image_encode.h"
#include "layers/activation.h"
#include "layers/init.h"
#include "layers/interop.h"
#include "layers/linear.h"
#include "models/registry.h"
#include "tools/engine/training_checkpoint.h"
#include "tools/cli/commands.h"
#include "tools/onnx/onnx_export.h"
#include "tests/onnx/onnx_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
namespace ox = ONNX_NAMESPACE;
using kiln::testing::expect_error;

// --- the command ----------------------------------------------------------------------------------

std::string temp_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_onnx_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

json lenet_config() {
  return json::parse(R"({"model": {"name": "lenet"},
    "data": {"source": "synthetic", "synthetic": {"size": 4, "height": 28, "width": 28, "channels": 1, "num_classes": 10},
             "val_transforms": [{"type": "normalize", "mean": [0.286], "std": [0.353]}]},
    "train": {"seed": 3}})");
}

TEST(OnnxExportCommand, RunFolderGivesMetadataClassesAndAReference) {
  std::string run = temp_dir("run");
  std::ofstream(run + "/config.json") << lenet_config().dump();
  std::vector<std::string> classes = {"tee", "trouser", "pullover", "dress", "coat",
                                      "sandal", "shirt", "sneaker", "bag", "boot"};
  std::ofstream(run + "/classes.json") << json(classes).dump();
  std::string out = run + "/m.onnx", ref = run + "/ref.safetensors";
  EXPECT_EQ(cli::cmd_export({run, "init=random", "format=onnx", "out=" + out, "reference=" + ref}), 0);
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  ox::ModelProto m = read_model(out);
  std::shared_ptr<Module> model = models::build_model({{"name", "lenet"}});
  check_structure(m, *model, 1, 28, 10);
  EXPECT_EQ(metadata(m, "kiln.model"), "lenet");
  EXPECT_EQ(metadata(m, "kiln.input_layout"), "NCHW float32 (batch, 1, 28, 28)");
  EXPECT_EQ(metadata(m, "kiln.channel_order"), "grey");
  EXPECT_EQ(metadata(m, "kiln.mean"), "[0.286]");
  EXPECT_EQ(metadata(m, "kiln.std"), "[0.353]");
  EXPECT_NE(metadata(m, "kiln.val_transforms").find("normalize"), std::string::npos);
  EXPECT_NE(metadata(m, "kiln.pixel_scale").find("/ 255"), std::string::npos);
  EXPECT_EQ(metadata(m, "kiln.classes"), json(classes).dump());
  EXPECT_EQ(metadata(m, "kiln.weights"), "init=random, seed 3");
  // Class names that do not match the model's outputs are refused naming the file.
  std::ofstream(run + "/classes.json") << R"(["a", "b"])";
  expect_error([&] { cli::cmd_export({run, "init=random", "out=" + run + "/m2.onnx"}); },
               {"classes.json' names 2 classes but the model has 10 outputs"});

  // The reference: kiln's logits of the model the config's seed builds, on the stored input.
  SafetensorsContents r = load_safetensors(ref);
  ASSERT_EQ(r.tensors.count("input"), 1u);
  ASSERT_EQ(r.tensors.count("logits"), 1u);
  EXPECT_EQ(r.tensors.at("input").shape(), (Shape{4, 1, 28, 28}));
  EXPECT_EQ(r.tensors.at("logits").shape(), (Shape{4, 10}));
  manual_seed(3);
  std::shared_ptr<Module> same = models::build_model({{"name", "lenet"}});
  same->eval();
  NoGradGuard ng;
  Tensor logits = (*same)(r.tensors.at("input").permute({0, 2, 3, 1}).contiguous()).contiguous();
  for (int64_t i = 0; i < logits.numel(); ++i)
    EXPECT_FLOAT_EQ(logits.data<float>()[i], r.tensors.at("logits").data<float>()[i]) << i;
}

TEST(OnnxExportCommand, WeightsFileIsExported) {
  std::string d = temp_dir("weights");
  std::ofstream(d + "/c.json") << lenet_config().dump();
  std::shared_ptr<Module> model = models::build_model({{"name", "lenet"}});
  for (auto& [name, t] : model->named_parameters()) t.fill_(0.25f);
  save_safetensors(d + "/w.safetensors", export_pytorch_state_dict(*model));
  EXPECT_EQ(cli::cmd_export({d + "/c.json", "weights=" + d + "/w.safetensors", "out=" + d + "/m.onnx"}), 0);
  ox::ModelProto m = read_model(d + "/m.onnx");
  EXPECT_EQ(metadata(m, "kiln.weights"), d + "/w.safetensors");
  EXPECT_TRUE(metadata(m, "kiln.classes").empty());  // a config file: no classes.json
  int checked = 0;
  for (auto& init : m.graph().initializer()) {
    if (init.name() != "classifier.3.bias") continue;
    float v;
    std::memcpy(&v, init.raw_data().data(), 4);
    EXPECT_EQ(v, 0.25f);
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

TEST(OnnxExportCommand, RunFolderWithoutWeightsExportsItsLastCheckpoint) {
  std::string run = temp_dir("ckpt");
  std::ofstream(run + "/config.json") << lenet_config().dump();
  std::shared_ptr<Module> model = models::build_model({{"name", "lenet"}});
  for (auto& [name, t] : model->named_parameters()) t.fill_(-0.5f);
  TrainingState state;
  state.config = lenet_config();
  save_checkpoint(run + "/last", *model, state);
  EXPECT_EQ(cli::cmd_export({run, "out=" + run + "/m.onnx"}), 0);
  ox::ModelProto m = read_model(run + "/m.onnx");
  EXPECT_EQ(metadata(m, "kiln.weights"), run);
  int checked = 0;
  for (auto& init : m.graph().initializer()) {
    if (init.name() != "classifier.3.bias") continue;
    float v;
    std::memcpy(&v, init.raw_data().data(), 4);
    EXPECT_EQ(v, -0.5f);
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

TEST(OnnxExportCommand, ReferenceFromImagesGoesThroughTheValidationTransforms) {
  std::string d = temp_dir("images");
  fs::create_directories(d + "/photos");
  std::ofstream(d + "/c.json") << lenet_config().dump();
  // Two 28x28 grey PNGs (and a file that is not an image, which a folder listing skips).
  for (int k = 0; k < 2; ++k) {
    std::vector<uint8_t> px(28 * 28);
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 7 + k * 50) % 256);
    write_file(d + "/photos/" + std::to_string(k) + ".png", encode_png(px.data(), 28, 28, 1));
  }
  std::ofstream(d + "/photos/notes.txt") << "not an image";
  std::string ref = d + "/ref.safetensors";
  EXPECT_EQ(cli::cmd_export({d + "/c.json", "init=random", "out=" + d + "/m.onnx", "reference=" + ref,
                             "images=" + d + "/photos"}), 0);
  SafetensorsContents r = load_safetensors(ref);
  const Tensor& in = r.tensors.at("input");
  ASSERT_EQ(in.shape(), (Shape{2, 1, 28, 28}));
  for (int k = 0; k < 2; ++k)
    for (size_t i = 0; i < 28 * 28; i += 97) {
      float px = static_cast<float>((i * 7 + k * 50) % 256);
      EXPECT_NEAR(in.data<float>()[k * 784 + i], (px / 255.0 - 0.286) / 0.353, 1e-5) << k << " " << i;
    }
  EXPECT_EQ(r.tensors.at("logits").shape(), (Shape{2, 10}));
  // An image of another size is refused naming it and the size the model takes, before any file is written.
  std::vector<uint8_t> small(10 * 10, 9);
  write_file(d + "/small.png", encode_png(small.data(), 10, 10, 1));
  expect_error([&] { cli::cmd_export({d + "/c.json", "init=random", "out=" + d + "/m2.onnx", "reference=" + ref,
                                      "images=" + d + "/small.png"}); },
               {"image '" + d + "/small.png' is 10x10x1", "the model takes 28x28x1"});
  EXPECT_FALSE(fs::exists(d + "/m2.onnx"));
}

TEST(OnnxExportCommand, ErrorsNameTheArgument) {
  std::string d = temp_dir("errors");
  std::string cfg = d + "/c.json";
  std::ofstream(cfg) << lenet_config().dump();
  expect_error([&] { cli::cmd_export({cfg, "init=random", "format=tflite", "out=" + d + "/m"}); },
               {"format=tflite is not accepted; accepted: onnx"});
  expect_error([&] { cli::cmd_export({cfg, "init=random", "format=onnx"}); }, {"out=FILE is required"});
  expect_error([&] { cli::cmd_export({cfg, "out=" + d + "/m.onnx"}); }, {"needs weights=FILE", "or init=random"});
  expect_error([&] { cli::cmd_export({cfg, "init=zeros", "out=" + d + "/m.onnx"}); },
               {"init=zeros is not accepted; accepted: random"});
  expect_error([&] { cli::cmd_export({cfg, "init=random", "out=" + d + "/m.onnx", "images=" + d}); },
               {"images= needs reference=FILE"});
  expect_error([&] { cli::cmd_export({d, "init=random", "out=" + d + "/m.onnx"}); },
               {"is a folder without config.json"});
  expect_error([&] { cli::cmd_export({cfg, "init=random", "out=" + d + "/no/such/dir/m.onnx"}); },
               {"cannot write", "m.onnx.tmp"});
  EXPECT_FALSE(fs::exists(d + "/m.onnx"));
  EXPECT_EQ(cli::cmd_export({"--help"}), 0);
}

}  // namespace
}  // namespace kiln
