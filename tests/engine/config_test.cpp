// Config file loading and command-line overrides.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <fstream>
#include <sys/wait.h>

#include "core/device.h"
#include "tests/expect_error.h"
#include "tools/deploy/config.h"
#include "tools/deploy/model_check.h"
#include "tools/engine/trainer.h"

using namespace kiln;

using kiln::testing::error_of;

TEST(Config, OverridesShortFormsAndDottedPaths) {
  json c = json::parse(R"({"train": {"epochs": 10}, "optim": {"lr": 0.1},
                           "data": {"train_transforms": [{"type": "flip", "p": 0.5}]}})");
  apply_overrides(c, {"epochs=3", "batch=-1", "device=0,1", "lr=0.05", "optim.momentum=0.8",
                      "data.train_transforms.0.p=0.25", "precision=bf16", "train.checkpoint=\"blocks\""});
  EXPECT_EQ(c["train"]["epochs"], 3);
  EXPECT_EQ(c["data"]["batch_size"], -1);  // the global batch
  EXPECT_EQ(c["train"]["device"], "0,1");
  EXPECT_DOUBLE_EQ(c["optim"]["lr"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(c["optim"]["momentum"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(c["data"]["train_transforms"][0]["p"].get<double>(), 0.25);
  EXPECT_EQ(c["train"]["precision"], "bf16");
  EXPECT_EQ(c["train"]["checkpoint"], "blocks");
}

TEST(Config, ModelAsAnObjectIsTheWholeSectionAndAsANameItsName) {
  json c = json::parse(R"({"model": {"name": "lenet", "dropout": 0}})");
  apply_overrides(c, {R"(model={"layers": [{"type": "flatten"}, {"type": "linear", "in_features": 4, "out_features": 2}]})"});
  EXPECT_EQ(c["model"], json::parse(R"({"layers": [{"type": "flatten"}, {"type": "linear", "in_features": 4, "out_features": 2}]})"));
  apply_overrides(c, {"model=resnet20"});
  EXPECT_EQ(c["model"]["name"], "resnet20");
}

TEST(Config, BadOverridesNameTheArgument) {
  json c = json::parse(R"({"train": {"epochs": 10}, "data": {"train_transforms": []}})");
  EXPECT_NE(error_of([&] { apply_overrides(c, {"epochs"}); }).find("'epochs' is not key=value"), std::string::npos);
  EXPECT_NE(error_of([&] { apply_overrides(c, {"train.epochs.x=1"}); }).find("train.epochs holds an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_overrides(c, {"data.train_transforms.3.p=1"}); }).find("has 0 entries"),
            std::string::npos);
}

TEST(Config, FileErrorsNameTheFile) {
  EXPECT_NE(error_of([] { load_config_file("/nonexistent/x.json"); }).find("'/nonexistent/x.json' cannot be read"),
            std::string::npos);
  std::string p = ::testing::TempDir() + "bad.json";
  std::ofstream(p) << "{\"train\": {\"epochs\": 3,}}";
  std::string m = error_of([&] { load_config_file(p); });
  EXPECT_NE(m.find("is not valid JSON"), std::string::npos) << m;
  EXPECT_NE(m.find(p), std::string::npos) << m;
}

// --- device= as users type it --------------------------------------------------------------------

TEST(Config, DeviceOverridesKeepWhatWasTyped) {
  for (const auto& [arg, want] : std::vector<std::pair<std::string, std::string>>{
           {"device=0", "0"}, {"device=0,1", "0,1"}, {"device=[0,1]", "[0,1]"}, {"device=cuda:1", "cuda:1"},
           {"device=cpu", "cpu"}, {"name=2024", "2024"}, {"resume=7", "7"}, {"precision=16", "16"}}) {
    json c = json::object();
    apply_overrides(c, {arg});
    std::string key = expand_short_form(arg.substr(0, arg.find('=')));
    const json& v = key.find('.') == std::string::npos ? c[key] : c[key.substr(0, key.find('.'))][key.substr(key.find('.') + 1)];
    EXPECT_EQ(v, want) << arg;
  }
  // A key the file holds as a string keeps the text too; other keys still parse as JSON.
  json c = json::parse(R"({"data": {"root": "x"}, "train": {"epochs": 1}})");
  apply_overrides(c, {"data.root=2024", "train.epochs=3", "train.device=[0,1]", "optim.lr=0.05"});
  EXPECT_EQ(c["data"]["root"], "2024");
  EXPECT_EQ(c["train"]["epochs"], 3);
  EXPECT_EQ(c["train"]["device"], json::parse("[0,1]"));  // long form, no file entry: JSON, read below
  EXPECT_DOUBLE_EQ(c["optim"]["lr"].get<double>(), 0.05);
}

TEST(Config, DeviceReaderTakesNumbersAndLists) {
  EXPECT_EQ(device_option_from_json(json(0), "train.device", ""), "0");
  EXPECT_EQ(device_option_from_json(json::parse("[0, 1]"), "train.device", ""), "0,1");
  EXPECT_EQ(device_option_from_json(json::parse(R"(["cuda:0", 1])"), "train.device", ""), "cuda:0,1");
  EXPECT_EQ(device_option_from_json(json("cpu"), "train.device", ""), "cpu");
  EXPECT_EQ(device_option_from_json(json(nullptr), "train.device", "cpu"), "cpu");
  kiln::testing::expect_error([] { device_option_from_json(json(1.5), "train.device", ""); },
                              {"train.device: expected a device", "[0, 1]", "1.5"});
  kiln::testing::expect_error([] { device_option_from_json(json::parse("[0, true]"), "train.device", ""); },
                              {"train.device[1]: expected a device", "true"});
  kiln::testing::expect_error([] { device_option_from_json(json::array(), "train.device", ""); },
                              {"train.device: an empty device list"});
  // Through the trainer's reader, as `device=0` and `train.device=[0,1]` arrive.
  EXPECT_EQ(TrainOptions::from_json(json::parse(R"({"device": 0})"), "train").device, "0");
  EXPECT_EQ(TrainOptions::from_json(json::parse(R"({"device": [0, 1]})"), "train").device, "0,1");
}

// This machine (a CPU build in CI) has no GPU: device=0 says so and lists cpu; a list names itself.
TEST(Config, MissingGpusAreNamedWithWhatExists) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "expects a machine without GPUs";
  kiln::testing::expect_error([] { parse_device_list("0"); }, {"device=0: this machine has no such GPU; available: cpu"});
  kiln::testing::expect_error([] { parse_device_list("7"); }, {"device=7: this machine has no such GPU; available: cpu"});
  kiln::testing::expect_error([] { parse_device_list("0,1"); }, {"device=0,1: cuda:0 is not on this machine; available: cpu"});
  kiln::testing::expect_error([] { parse_device_list("[0,1]"); }, {"device=[0,1]: cuda:0 is not on this machine"});
  kiln::testing::expect_error([] { parse_device_list("cpu,1"); }, {"device=cpu,1: cuda:1 is not on this machine"});
  EXPECT_EQ(parse_device_list("cpu")[0], Device::cpu());
}

// --- strict JSON --------------------------------------------------------------------------------

static std::string write_file(const std::string& name, const std::string& text) {
  std::string p = ::testing::TempDir() + name;
  std::ofstream(p) << text;
  return p;
}

TEST(Config, DuplicateKeysAreRefusedNamingPathAndFile) {
  std::string p = write_file("dup.json", R"({"train": {"epochs": 3, "seed": 1, "epochs": 5}})");
  kiln::testing::expect_error([&] { load_config_file(p); },
                              {"config file '" + p + "'", "duplicate key train.epochs"});
  p = write_file("dup2.json", R"({"data": {"train_transforms": [{"type": "flip"}, {"type": "crop", "size": 1, "size": 2}]}})");
  kiln::testing::expect_error([&] { load_config_file(p); }, {"duplicate key data.train_transforms[1].size"});
  p = write_file("dup3.json", R"({"name": "a", "name": "b"})");
  kiln::testing::expect_error([&] { load_config_file(p); }, {"duplicate key name"});
  // The same key in two objects is fine; comments are still allowed.
  p = write_file("nodup.json", "{\"a\": {\"x\": 1}, // note\n \"b\": {\"x\": 2}, \"c\": [{\"x\": 1}, {\"x\": 2}]}");
  json j = load_config_file(p);
  EXPECT_EQ(j["b"]["x"], 2);
  EXPECT_EQ(j["c"][1]["x"], 2);
  json c = json::object();
  kiln::testing::expect_error([&] { apply_overrides(c, {R"(optim={"lr": 1, "lr": 2})"}); },
                              {"argument 'optim={\"lr\": 1, \"lr\": 2}' (optim)", "duplicate key lr"});
}

TEST(Config, NumbersBeyondADoubleNameKeyAndFile) {
  json c = json::object();
  kiln::testing::expect_error([&] { apply_overrides(c, {"lr=1e400"}); },
                              {"argument 'lr=1e400' (optim.lr): 1e400 is out of range; accepted: finite numbers"});
  std::string p = write_file("big.json", R"({"optim": {"name": "sgd", "lr": 1e400}})");
  kiln::testing::expect_error([&] { load_config_file(p); },
                              {"config file '" + p + "': optim.lr = 1e400 is out of range"});
  p = write_file("biglist.json", R"({"data": {"mean": [0.5, -1e999]}})");
  kiln::testing::expect_error([&] { load_config_file(p); }, {"data.mean[1] = -1e999 is out of range"});
}

// A 5 MB list used to cost over 1 GB to read; no config key takes a list that long.
TEST(Config, LongListsAndDeepNestingAreRefused) {
  std::string big = "{\"model\": {\"name\": \"lenet\"}, \"data\": {\"mean\": [";
  for (size_t i = 0; i < 2'500'000; ++i) big += i ? ",0" : "0";
  big += "]}}";
  std::string p = write_file("long.json", big);
  kiln::testing::expect_error([&] { load_config_file(p); },
                              {"config file '" + p + "': data.mean has more than 10000 entries"});
  std::string deep(100, '[');
  deep += std::string(100, ']');
  p = write_file("deep.json", "{\"a\": " + deep + "}");
  kiln::testing::expect_error([&] { load_config_file(p); }, {"nested more than 64 levels"});
  std::string list = "[0";
  for (int i = 1; i < 10000; ++i) list += ",0";
  EXPECT_EQ(parse_config_text(list + "]", "test").size(), 10000u);
}

// --- checks before a run creates anything --------------------------------------------------------

namespace {
json synthetic_config(const std::string& runs, json layers_or_name) {
  json c = json::parse(R"({
    "name": "check",
    "data": {"source": "synthetic", "synthetic": {"size": 64, "height": 8, "width": 8, "channels": 3, "num_classes": 4},
             "batch_size": 16, "workers": 0},
    "train": {"epochs": 1, "plots": false}
  })");
  c["model"] = layers_or_name.is_array() ? json{{"layers", layers_or_name}} : layers_or_name;
  c["train"]["runs_dir"] = runs;
  return c;
}
json tiny_layers(int64_t in_channels, int64_t in_features, int64_t classes) {
  return json::array({{{"type", "conv2d"}, {"in_channels", in_channels}, {"out_channels", 4}, {"kernel_size", 3}, {"padding", 1}},
                      {{"type", "relu"}},
                      {{"type", "flatten"}},
                      {{"type", "linear"}, {"in_features", in_features}, {"out_features", classes}}});
}
std::string fresh_runs(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_check_" + name;
  std::filesystem::remove_all(d);
  return d;
}
}  // namespace

TEST(ModelCheck, WrongModelIsRefusedBeforeTheRunFolderNamingTheKey) {
  struct Case {
    std::string name;
    json model;
    std::vector<std::string> parts;
  };
  std::vector<Case> cases = {
      {"channels", tiny_layers(1, 256, 4), {"model.layers[0] (conv2d) does not fit its input [2, 8, 8, 3]", "8x8x3"}},
      {"linear", tiny_layers(3, 100, 4), {"model.layers[3] (linear) does not fit its input [2, 256]"}},
      {"classes", tiny_layers(3, 256, 2), {"model.layers[3] gives 2 scores per image, but the data has 4 classes"}},
      {"in_channels", json{{"name", "lenet"}, {"in_channels", 1}, {"num_classes", 4}},
       {"model.in_channels = 1 does not fit the data", "set model.in_channels to 3"}},
      {"alexnet", json{{"name", "alexnet"}, {"num_classes", 4}},
       {"model.name = \"alexnet\" does not fit images of 8x8x3", "data.train_transforms"}},
      {"num_classes", json{{"name", "resnet20"}, {"num_classes", 2}},
       {"model.num_classes gives 2 scores per image, but the data has 4 classes"}},
  };
  for (const Case& c : cases) {
    std::string runs = fresh_runs(c.name);
    kiln::testing::expect_error([&] { train(synthetic_config(runs, c.model), true); }, c.parts);
    EXPECT_FALSE(std::filesystem::exists(runs)) << c.name << ": the run folder was created before the check";
  }
  // Progressive resizing: the first epoch's smaller images must fit as well.
  std::string small = fresh_runs("progressive");
  json pc = synthetic_config(small, tiny_layers(3, 256, 4));  // flatten + linear: 8x8 only
  pc["data"]["progressive_resize"] = {{"min_size", 4}, {"start_epoch", 1}, {"end_epoch", 2}};
  kiln::testing::expect_error([&] { train(pc, true); },
                              {"data.progressive_resize: the first epoch's 4x4 images do not fit the model",
                               "model.layers[3] (linear) does not fit its input [2, 64]", "raise data.progressive_resize.min_size"});
  EXPECT_FALSE(std::filesystem::exists(small));
  // A model that fits trains (and the check left its BN statistics and mode alone).
  std::string runs = fresh_runs("fits");
  TrainResult r = train(synthetic_config(runs, tiny_layers(3, 256, 4)), true);
  EXPECT_TRUE(std::filesystem::exists(r.run_dir + "/config.json"));
}

TEST(LoaderMemory, HugeSizesAreRefusedNamingTheKeyAndTheMemory) {
  DataConfig d = DataConfig::from_json(json::parse(R"({"source": "synthetic", "workers": 2, "prefetch": 4})"));
  const ImageShape shape{28, 28, 1};
  // (64 train + 64 val) x (784 x 4 + 8) bytes x 5 buffers
  EXPECT_DOUBLE_EQ(loader_buffer_bytes(d, shape, 64), 128.0 * (784 * 4 + 8) * 5);
  check_loader_memory(d, shape, 64, 1e9);
  kiln::testing::expect_error([&] { check_loader_memory(d, shape, 1'000'000'000, 64e9); },
                              {"data.batch_size = 1000000000: the data loaders' batch buffers would take 28.6 TiB",
                               "more than the 59.6 GiB of memory available", "data.prefetch = 4"});
  d.loader.prefetch = 100'000'000;
  kiln::testing::expect_error([&] { check_loader_memory(d, shape, 64, 64e9); }, {"data.prefetch = 100000000:", "GiB"});
  // "auto" (0 in code) counts as workers + 2 buffers ahead, and u8 batches a byte a pixel.
  d.loader.prefetch = 0;
  d.loader.dtype = "u8";
  EXPECT_DOUBLE_EQ(loader_buffer_bytes(d, shape, 64), 128.0 * (784 + 8) * 5);
  d.loader.dtype = "f32";
  d.loader.prefetch = 4;
  d.val_batch_size = 2'000'000'000;
  kiln::testing::expect_error([&] { check_loader_memory(d, shape, 64, 64e9); }, {"data.val_batch_size = 2000000000:"});
  // Through the trainer, before anything is allocated or written.
  std::string runs = fresh_runs("memory");
  json c = synthetic_config(runs, tiny_layers(3, 256, 4));
  apply_overrides(c, {"batch=1e15"});
  kiln::testing::expect_error([&] { train(c, true); }, {"data.batch_size = 1000000000000000:", "of memory available"});
  EXPECT_FALSE(std::filesystem::exists(runs));
  apply_overrides(c, {"batch=1e30"});
  kiln::testing::expect_error([&] { train(c, true); }, {"data.batch_size = 1e+30 is not accepted"});
}

// --- the kiln binary: one line, exit 1 -----------------------------------------------------------

namespace {
struct KilnRun {
  int status;
  std::string output;
};
KilnRun run_kiln(const std::string& args) {
  std::string cmd = std::string(KILN_BINARY_DIR) + "/tools/kiln " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  KilnRun r{-1, ""};
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.output.append(buf, n);
  r.status = pclose(f);
#ifndef NDEBUG
  // A build without NDEBUG (the sanitizer build) appends source locations by design (core/check.cpp):
  // compare the messages without them.
  r.output = std::regex_replace(r.output, std::regex(R"( \([A-Za-z0-9_/.]+\.(cpp|h|cu):[0-9]+\))"), "");
#endif
  return r;
}
}  // namespace

TEST(KilnBinary, ConfigErrorsAreOneLineAndExitOne) {
  std::string runs = fresh_runs("binary");
  json c = synthetic_config(runs, tiny_layers(3, 256, 4));
  std::string p = write_file("binary.json", c.dump(2));
  if (cuda_device_count() == 0) {
    KilnRun r = run_kiln("train " + p + " device=0");
    EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.output;
    EXPECT_EQ(r.output, "kiln: error: device=0: this machine has no such GPU; available: " + available_devices() + "\n");
    r = run_kiln("train " + p + " device=[0,1]");
    EXPECT_EQ(r.output, "kiln: error: device=[0,1]: cuda:0 is not on this machine; available: " + available_devices() + "\n");
  }
  KilnRun r = run_kiln("train " + p + " lr=1e400");
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.output;
  EXPECT_EQ(r.output,
            "kiln: error: argument 'lr=1e400' (optim.lr): 1e400 is out of range; accepted: finite numbers (magnitude "
            "below 1.8e308)\n");
  r = run_kiln("train " + p + " seed=18446744073709551616");
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.output;
  EXPECT_NE(r.output.find("train.seed = 1.8446744073709552e+19 is out of range"), std::string::npos) << r.output;
  std::string dup = write_file("binary_dup.json", R"({"name": "a", "train": {"epochs": 1, "epochs": 2}})");
  r = run_kiln("train " + dup);
  EXPECT_EQ(r.output, "kiln: error: config file '" + dup + "': duplicate key train.epochs (a key may appear once in an "
                      "object; the later value used to win silently)\n");
  r = run_kiln("train " + p + " model.layers.0.in_channels=1");
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.output;
  EXPECT_NE(r.output.find("model.layers[0] (conv2d) does not fit"), std::string::npos) << r.output;
#ifdef NDEBUG
  EXPECT_EQ(r.output.find(".cpp:"), std::string::npos) << "no source location without KILN_DEBUG=1: " << r.output;
#endif
  EXPECT_FALSE(std::filesystem::exists(runs));
}
