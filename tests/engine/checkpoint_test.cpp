// Checkpoints (tools/engine/training_checkpoint.h, its files tools/deploy/checkpoint.h): the folder
// layout and its cleanup, the paths users pass, flat pairs of earlier runs, and the refusal (naming
// file and field or tensor) of damaged or diverged state: missing/out-of-range fields, non-finite
// tensors, integer tensors for float parameters; training states of an earlier kiln whose flatten
// gave (h, w, c) order (tools/engine/checkpoint_legacy.h).
// Also: weights that overflow to NaN in the forward stop the trainer with its non-finite-loss error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/autograd.h"
#include "core/io/safetensors.h"
#include "core/ops/loss.h"
#include "models/registry.h"
#include "optim/optimizer.h"
#include "tests/gradcheck.h"
#include "tests/layers/error_util.h"
#include "tools/deploy/checkpoint.h"
#include "tools/engine/training_checkpoint.h"
#include "tools/engine/checkpoint_legacy.h"
#include "tools/deploy/config.h"
#include "tools/engine/trainer.h"

using namespace kiln;
using kiln::testing::error_of;
namespace fs = std::filesystem;

namespace {

const json kModel = json::parse(R"({"layers": [
  {"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1},
  {"type": "batch_norm2d", "num_features": 4},
  {"type": "relu"},
  {"type": "max_pool2d", "kernel_size": 2},
  {"type": "flatten"},
  {"type": "linear", "in_features": 64, "out_features": 3}]})");

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_ckpt_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A model from kModel and the training state of an SGD optimizer over it after one step.
struct Fixture {
  std::shared_ptr<Module> model = models::build_model(kModel, "model");
  TrainingState state;
  Fixture() {
    Tensor logits = model->forward(Tensor::ones({2, 8, 8, 3}));
    std::vector<ParamRef> params;
    for (auto& [name, p] : model->named_parameters()) params.push_back({name, p});
    auto opt = make_optimizer(json{{"name", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}}, params);
    ops::cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0, 2}, {2})).backward();
    opt->step();
    state.epoch = 1;
    state.step = 5;
    state.optimizer = opt->state_dict();
    state.config = json{{"model", kModel}};
  }
  std::shared_ptr<Module> fresh_model() const {
    return models::build_model(kModel, "model");
  }
};

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Rewrites a safetensors file through `edit` (its tensors and metadata).
void rewrite(const std::string& file, const std::function<void(SafetensorsContents&)>& edit) {
  SafetensorsContents c = load_safetensors(file);
  edit(c);
  save_safetensors(file, c.tensors, c.metadata);
}

}  // namespace

TEST(Checkpoint, FolderPerPairOneSymlinkNoTemporariesLeft) {
  std::string dir = fresh_dir("layout");
  Fixture f;
  save_checkpoint(dir + "/last", *f.model, f.state);
  f.state.step = 9;
  f.state.epoch = 2;
  save_checkpoint(dir + "/last", *f.model, f.state);
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"last", "last-9", "last.safetensors", "last.state.safetensors"}));
  EXPECT_EQ(fs::read_symlink(dir + "/last").string(), "last-9");
  EXPECT_EQ(entries(dir + "/last-9"), (std::vector<std::string>{"last.safetensors", "last.state.safetensors"}));
  // The flat names still read (PyTorch users load last.safetensors).
  EXPECT_EQ(load_safetensors(dir + "/last.safetensors").metadata.at("step"), "9");
  EXPECT_EQ(load_safetensors(dir + "/last.state.safetensors").metadata.at("step"), "9");
  // Saving the same step again (a re-run) makes a new folder, never rewrites the current pair.
  save_checkpoint(dir + "/last", *f.model, f.state);
  EXPECT_EQ(fs::read_symlink(dir + "/last").string(), "last-9.1");
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"last", "last-9.1", "last.safetensors", "last.state.safetensors"}));

  // Every path a user may pass resolves to the pair, and its parent is the run folder.
  for (std::string p : {dir, dir + "/", dir + "/last", dir + "/last.safetensors", dir + "/last.state.safetensors",
                        dir + "/last-9.1", dir + "/last-9.1/last.safetensors"}) {
    std::string base = resolve_checkpoint(p);
    EXPECT_EQ(fs::path(base).parent_path(), fs::path(dir)) << p << " -> " << base;
    auto m = f.fresh_model();
    TrainingState s = load_checkpoint(base, *m);
    EXPECT_EQ(s.step, 9) << p;
    EXPECT_EQ(s.epoch, 2) << p;
  }
  auto m = f.fresh_model();
  load_weights(dir + "/last.safetensors", *m);
  load_weights(dir, *m);
  EXPECT_EQ(m->state_dict().at("0.weight").to_double_vector(), f.model->state_dict().at("0.weight").to_double_vector());
}

TEST(Checkpoint, StaleTemporariesOfKilledSavesAreRemoved) {
  std::string dir = fresh_dir("stale");
  Fixture f;
  save_checkpoint(dir + "/last", *f.model, f.state);
  // What kills at each point of a save leave: a half-written folder, a renamed folder never
  // switched to, a link never renamed into place; the next save removes them, not other files.
  fs::create_directories(dir + "/ckpt.tmp-a1B2c3");
  std::ofstream(dir + "/ckpt.tmp-a1B2c3/last.state.safetensors.tmp") << "partial";
  fs::create_directories(dir + "/last-6");
  fs::create_symlink("last-6", dir + "/last.tmp-Zz9yX8");
  std::ofstream(dir + "/metrics.csv") << "epoch\n";
  fs::create_directories(dir + "/last-notes");
  f.state.step = 6;
  save_checkpoint(dir + "/last", *f.model, f.state);
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"last", "last-6", "last-notes", "last.safetensors",
                                                    "last.state.safetensors", "metrics.csv"}));
  EXPECT_EQ(fs::read_symlink(dir + "/last").string(), "last-6");
  auto m = f.fresh_model();
  EXPECT_EQ(load_checkpoint(resolve_checkpoint(dir), *m).step, 6);
  // `best` beside `last` keeps its own folder.
  save_checkpoint(dir + "/best", *f.model, f.state);
  EXPECT_TRUE(fs::exists(dir + "/last-6/last.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/best-6/best.safetensors"));
  EXPECT_EQ(load_checkpoint(resolve_checkpoint(dir + "/best.safetensors"), *m).step, 6);
}

TEST(Checkpoint, FlatPairsOfEarlierRunsLoadAndAreReplacedAtTheNextSave) {
  std::string dir = fresh_dir("flat");
  Fixture f;
  save_checkpoint(dir + "/last", *f.model, f.state);
  // The flat layout: last.safetensors and last.state.safetensors as plain files.
  for (const char* n : {"last.safetensors", "last.state.safetensors"}) {
    fs::remove(dir + "/" + n);
    fs::copy_file(dir + "/last-5/" + n, dir + "/" + n);
  }
  fs::remove(dir + "/last");
  fs::remove_all(dir + "/last-5");
  EXPECT_EQ(resolve_checkpoint(dir), dir + "/last");
  auto m = f.fresh_model();
  EXPECT_EQ(load_checkpoint(resolve_checkpoint(dir), *m).step, 5);
  f.state.step = 7;
  save_checkpoint(dir + "/last", *f.model, f.state);
  EXPECT_TRUE(fs::is_symlink(dir + "/last.safetensors"));
  EXPECT_EQ(load_checkpoint(resolve_checkpoint(dir), *m).step, 7);
}

TEST(Checkpoint, EveryStateFieldIsCheckedNamingFileAndField) {
  std::string dir = fresh_dir("fields");
  Fixture f;
  save_checkpoint(dir + "/last", *f.model, f.state);
  const std::string state = dir + "/last-5/last.state.safetensors";
  const SafetensorsContents good = load_safetensors(state);
  struct Case {
    std::function<void(json&, SafetensorsContents&)> edit;
    std::vector<std::string> expect;
  };
  std::vector<Case> cases = {
      {[](json& j, auto&) { j["epoch"] = -1; }, {"epoch = -1", "0 <= epoch <= step"}},
      {[](json& j, auto&) { j["epoch"] = 6; }, {"epoch = 6", "step = 5"}},
      {[](json& j, auto&) { j["step"] = -5; }, {"step"}},
      {[](json& j, auto&) { j.erase("step"); }, {"kiln_training_state.step"}},
      {[](json& j, auto&) { j.erase("rng_offset"); }, {"kiln_training_state.rng_offset"}},
      {[](json& j, auto&) { j["rng_seed"] = -3; }, {"kiln_training_state.rng_seed"}},
      {[](json& j, auto&) { j["epoch"] = 1.5; }, {"kiln_training_state.epoch"}},
      {[](json& j, auto&) { j["best_top1"] = 7; }, {"best_top1 = 7"}},
      {[](json& j, auto&) { j["best_top1"] = "high"; }, {"kiln_training_state.best_top1"}},
      {[](json& j, auto&) { j["best"]["metric"] = "acc"; }, {"kiln_training_state.best.metric = \"acc\"", "ema_loss"}},
      {[](json& j, auto&) { j["best"]["epoch"] = 2; }, {"best.epoch = 2", "0 .. epoch (1)"}},
      {[](json& j, auto&) { j["best"].erase("value"); }, {"kiln_training_state.best.value is required"}},
      {[](json& j, auto&) { j["best"]["epoch"] = -1; }, {"best.epoch = -1"}},
      {[](json& j, auto&) { j["early_stopping"]["value"] = "x"; }, {"kiln_training_state.early_stopping.value"}},
      {[](json& j, auto&) { j["early_stopping"]["epoch"] = -1; }, {"early_stopping.epoch = -1"}},
      {[](json& j, auto&) { j["stopped_early"] = 2; }, {"stopped_early = 2", "0 .. epoch (1)"}},
      {[](json& j, auto&) { j["optimizer_type"] = ""; }, {"optimizer_type is empty"}},
      {[](json& j, auto&) { j["optimizer_scalars"] = json::object({{"step", "x"}}); }, {"kiln_training_state.optimizer_scalars.step"}},
      {[](json& j, auto&) { j["scaler"] = json::object({{"scale", -1.0}, {"growth_tracker", 0}, {"consecutive_nonfinite", 0}, {"skipped_steps", 0}}); },
       {"field scaler", "scale = -1"}},
      {[](json& j, auto&) { j["scaler"] = nullptr; }, {"kiln_training_state.scaler"}},
      {[](json& j, auto&) { j.erase("config"); }, {"config must be an object"}},
      {[](json& j, auto&) { j["epochs_done"] = 1; }, {"epochs_done"}},
      {[](json&, SafetensorsContents& c) { c.metadata.erase("step"); }, {"has no step in its metadata"}},
      {[](json&, SafetensorsContents& c) { c.metadata["step"] = "five"; }, {"metadata step = \"five\""}},
      {[](json&, SafetensorsContents& c) { c.metadata["step"] = "6"; }, {"metadata step 6", "step 5"}},
      {[](json&, SafetensorsContents& c) { c.metadata.erase("kiln_training_state"); }, {"no training state"}},
      {[](json&, SafetensorsContents& c) { c.metadata["kiln_training_state"] = "{"; }, {"not valid JSON"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SafetensorsContents c = good;
    json j = json::parse(c.metadata.at("kiln_training_state"));
    cases[i].edit(j, c);
    if (c.metadata.count("kiln_training_state") && c.metadata["kiln_training_state"] != "{")
      c.metadata["kiln_training_state"] = j.dump();
    save_safetensors(state, c.tensors, c.metadata);
    auto m = f.fresh_model();
    std::string msg = error_of([&] { load_checkpoint(resolve_checkpoint(dir), *m); });
    EXPECT_NE(msg.find(state), std::string::npos) << "case " << i << " does not name the file: " << msg;
    for (const std::string& e : cases[i].expect)
      EXPECT_NE(msg.find(e), std::string::npos) << "case " << i << ": '" << e << "' not in: " << (msg.empty() ? "no error" : msg);
  }
  save_safetensors(state, good.tensors, good.metadata);
  auto m = f.fresh_model();
  EXPECT_EQ(load_checkpoint(resolve_checkpoint(dir), *m).step, 5);
  // The weights' step must match too, and be a number.
  rewrite(dir + "/last-5/last.safetensors", [](SafetensorsContents& c) { c.metadata.erase("step"); });
  std::string msg = error_of([&] { load_checkpoint(resolve_checkpoint(dir), *m); });
  EXPECT_NE(msg.find("last-5/last.safetensors' has no step"), std::string::npos) << msg;
}

// train.best_metric's and train.early_stopping's records round-trip; a state of an earlier kiln,
// which has only best_top1, reads it as a top-1 record (the EMA's where its config's best_by says so).
TEST(Checkpoint, MetricRecordsRoundTripAndEarlierBestTop1IsRead) {
  std::string dir = fresh_dir("records");
  Fixture f;
  f.state.best = {"loss", 0.25, 1};
  f.state.early_stopping = {"ema_top5", 0.875, 1};
  f.state.stopped_early = 1;
  save_checkpoint(dir + "/last", *f.model, f.state);
  auto m = f.fresh_model();
  TrainingState s = load_checkpoint(resolve_checkpoint(dir), *m);
  EXPECT_EQ(s.best.metric, "loss");
  EXPECT_EQ(s.best.best, 0.25);
  EXPECT_EQ(s.best.epoch, 1);
  EXPECT_EQ(s.early_stopping.metric, "ema_top5");
  EXPECT_EQ(s.early_stopping.best, 0.875);
  EXPECT_EQ(s.stopped_early, 1);
  const std::string state = dir + "/last-5/last.state.safetensors";
  EXPECT_EQ(json::parse(load_safetensors(state).metadata.at("kiln_training_state"))["best_top1"], -1)
      << "best_top1 holds a top-1 only";
  for (const char* by : {"live", "ema"}) {
    rewrite(state, [&](SafetensorsContents& c) {
      json j = json::parse(c.metadata.at("kiln_training_state"));
      for (const char* k : {"best", "early_stopping", "stopped_early"}) j.erase(k);
      j["best_top1"] = 0.75;
      j["config"]["train"] = {{"ema", {{"decay", 0.99}, {"best_by", by}}}};
      c.metadata["kiln_training_state"] = j.dump();
    });
    s = load_checkpoint(resolve_checkpoint(dir), *m);
    EXPECT_EQ(s.best.metric, std::string(by) == "ema" ? "ema_top1" : "top1");
    EXPECT_EQ(s.best.best, 0.75);
    EXPECT_EQ(s.best.epoch, 0);
    EXPECT_TRUE(s.early_stopping.metric.empty());
    EXPECT_EQ(s.stopped_early, 0);
  }
}

// --- training states of an earlier kiln, whose flatten gave (h, w, c) order -------------------------

namespace {
// A state in the earlier layout: the columns of each `linears` weight's optimizer tensors moved
// from (c, h, w) to (h, w, c) (flattened activations of `channels` channels), and no flatten_order.
void make_legacy(const std::string& state_file, const std::vector<std::string>& linears, int64_t channels) {
  rewrite(state_file, [&](SafetensorsContents& c) {
    json j = json::parse(c.metadata.at("kiln_training_state"));
    ASSERT_EQ(j.at("flatten_order"), "chw");
    j.erase("flatten_order");
    c.metadata["kiln_training_state"] = j.dump();
    for (auto& [key, t] : c.tensors)
      for (const std::string& lin : linears)
        if (key.rfind(lin + ".weight.", 0) == 0) {
          const int64_t rows = t.size(0), cols = t.size(1);
          t = t.reshape({rows, channels, cols / channels}).permute({0, 2, 1}).contiguous().reshape({rows, cols});
        }
  });
}

json optim_config(const std::string& name) {
  return name == "sgd" ? json{{"name", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}} : json{{"name", "adamw"}, {"lr", 0.01}};
}

// The training state of `opt_name` over `model` after one step on a batch of `input`'s shape.
OptimizerState stepped_state(Module& model, const std::string& opt_name, const Shape& input) {
  std::vector<ParamRef> params;
  for (auto& [name, p] : model.named_parameters()) params.push_back({name, p});
  auto opt = make_optimizer(optim_config(opt_name), params);
  Tensor logits = model.forward(kiln::testing::randn(input, 77));
  ops::cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>(input[0], 1), {input[0]})).backward();
  opt->step();
  return opt->state_dict();
}

void expect_same_tensors(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (auto& [key, t] : want) {
    ASSERT_TRUE(got.count(key)) << key;
    EXPECT_EQ(got.at(key).shape(), t.shape()) << key;
    EXPECT_EQ(got.at(key).to_double_vector(), t.to_double_vector()) << key;
  }
}
}  // namespace

TEST(Checkpoint, LegacyFlattenOrderStateIsConvertedOnLoad) {
  // kModel: conv 3 -> 4, BN, ReLU, maxpool -> (N, 4, 4, 4) -> flatten 64 -> linear "5".
  for (const char* opt_name : {"sgd", "adamw"}) {
    SCOPED_TRACE(opt_name);
    std::string dir = fresh_dir(std::string("legacy_") + opt_name);
    Fixture f;
    f.state.optimizer = stepped_state(*f.model, opt_name, {2, 8, 8, 3});
    const OptimizerState want = f.state.optimizer;
    save_checkpoint(dir + "/last", *f.model, f.state);
    const std::string state = dir + "/last-5/last.state.safetensors";
    make_legacy(state, {"5"}, 4);
    // The rewritten file really is in the other order (the test would prove nothing otherwise).
    const std::string slot = std::string("5.weight.") + (opt_name == std::string("sgd") ? "momentum_buffer" : "exp_avg");
    EXPECT_NE(load_safetensors(state).tensors.at(slot).to_double_vector(), want.tensors.at(slot).to_double_vector());
    auto m = f.fresh_model();
    TrainingState s = load_checkpoint(resolve_checkpoint(dir), *m);
    expect_same_tensors(s.optimizer.tensors, want.tensors);
    // Resumed: an optimizer over the loaded model takes the state and gives it back unchanged.
    std::vector<ParamRef> params;
    for (auto& [name, p] : m->named_parameters()) params.push_back({name, p});
    auto opt = make_optimizer(optim_config(opt_name), params);
    opt->load_state_dict(s.optimizer);
    expect_same_tensors(opt->state_dict().tensors, want.tensors);
    // The next save writes the current order again.
    save_checkpoint(dir + "/last", *m, s);
    json meta = json::parse(load_safetensors(dir + "/last.state.safetensors").metadata.at("kiln_training_state"));
    EXPECT_EQ(meta.at("flatten_order"), "chw");
  }
}

TEST(Checkpoint, LegacyFlattenOrderOfAFlattenOnTheInputUsesTheDataChannels) {
  const json model_json = json::parse(R"({"layers": [{"type": "flatten"}, {"type": "dropout"},
      {"type": "linear", "in_features": 48, "out_features": 3}]})");
  std::string dir = fresh_dir("legacy_input");
  auto model = models::build_model(model_json, "model");
  TrainingState st;
  st.step = 2;
  st.optimizer = stepped_state(*model, "sgd", {2, 4, 4, 3});
  const OptimizerState want = st.optimizer;
  // The channels of the flatten's input are the images': only the config as run tells them.
  st.config = json{{"model", model_json}};
  save_checkpoint(dir + "/last", *model, st);
  make_legacy(dir + "/last-2/last.state.safetensors", {"2"}, 3);
  auto m = models::build_model(model_json, "model");
  std::string msg = error_of([&] { load_checkpoint(resolve_checkpoint(dir), *m); });
  for (const char* e : {"last-2/last.state.safetensors", "earlier kiln", "linear '2'", "cannot be converted",
                        "Resume it with the kiln that wrote it"})
    EXPECT_NE(msg.find(e), std::string::npos) << e << " not in: " << (msg.empty() ? "no error" : msg);

  st.config["data"] = json::parse(R"({"source": "synthetic",
      "synthetic": {"size": 8, "height": 4, "width": 4, "channels": 3, "num_classes": 3}})");
  save_checkpoint(dir + "/last", *model, st);
  make_legacy(dir + "/last-2.1/last.state.safetensors", {"2"}, 3);
  TrainingState s = load_checkpoint(resolve_checkpoint(dir), *m);
  expect_same_tensors(s.optimizer.tensors, want.tensors);
}

TEST(Checkpoint, LegacyFlattenOrderConvertsTheClassifierOfFeatureModels) {
  // LeNet: features end in 64 channels of 2x2 (input 8) -> classifier.0 takes 256 (c, h, w) features.
  auto model = models::build_model(json{{"name", "lenet"}, {"in_channels", 1}, {"num_classes", 3}, {"input_size", 8}},
                                   "model");
  Tensor w = kiln::testing::randn({128, 256}, 5), other = kiln::testing::randn({3, 128}, 6);
  std::map<std::string, Tensor> legacy = {
      {"classifier.0.weight.exp_avg", w.reshape({128, 64, 4}).permute({0, 2, 1}).contiguous().reshape({128, 256})},
      {"classifier.3.weight.exp_avg", other}};
  convert_legacy_optimizer_state(*model, legacy, 0, "x.state.safetensors");
  EXPECT_EQ(legacy.at("classifier.0.weight.exp_avg").to_double_vector(), w.to_double_vector());
  EXPECT_EQ(legacy.at("classifier.3.weight.exp_avg").to_double_vector(), other.to_double_vector());
  // A layer the earlier kiln left in its own order after a flatten: refused, naming it.
  auto odd = models::build_model(json::parse(R"({"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 2, "kernel_size": 1}, {"type": "flatten"},
      {"type": "silu"}, {"type": "linear", "in_features": 8, "out_features": 2}]})"), "model");
  std::map<std::string, Tensor> none;
  std::string msg = error_of([&] { convert_legacy_optimizer_state(*odd, none, 0, "y.state.safetensors"); });
  for (const char* e : {"y.state.safetensors", "flatten '1'", "layer '2' (silu)", "cannot be converted"})
    EXPECT_NE(msg.find(e), std::string::npos) << e << " not in: " << (msg.empty() ? "no error" : msg);
}

TEST(Checkpoint, NonFiniteTensorsAreRefusedNamingFileAndTensor) {
  Fixture f;
  struct Case {
    const char* file;    // in the pair folder
    const char* tensor;  // its name there
    double value;
  };
  for (const Case& c : {Case{"last.safetensors", "0.weight", NAN}, Case{"last.safetensors", "1.running_var", INFINITY},
                        Case{"last.safetensors", "5.bias", -INFINITY}, Case{"last.state.safetensors", "0.weight.momentum_buffer", NAN}}) {
    std::string dir = fresh_dir("nonfinite");
    save_checkpoint(dir + "/last", *f.model, f.state);
    const std::string file = dir + "/last-5/" + c.file;
    rewrite(file, [&](SafetensorsContents& s) {
      ASSERT_TRUE(s.tensors.count(c.tensor)) << c.tensor;
      Tensor t = s.tensors.at(c.tensor).clone();
      t.data<float>()[1] = static_cast<float>(c.value);
      s.tensors[c.tensor] = t;
    });
    auto m = f.fresh_model();
    std::string msg = error_of([&] { load_checkpoint(resolve_checkpoint(dir), *m); });
    for (std::string e : {file, "tensor '" + std::string(c.tensor) + "'", std::string("non-finite"), std::string("flat index 1")})
      EXPECT_NE(msg.find(e), std::string::npos) << "'" << e << "' not in: " << (msg.empty() ? "no error" : msg);
    if (std::string(c.file) == "last.safetensors") {
      // `kiln eval weights=` reads the same way.
      msg = error_of([&] { load_weights(dir + "/last.safetensors", *m); });
      EXPECT_NE(msg.find("tensor '" + std::string(c.tensor) + "'"), std::string::npos) << msg;
    }
  }
}

TEST(Checkpoint, IntegerTensorsForFloatParametersAreRefused) {
  std::string dir = fresh_dir("dtype");
  Fixture f;
  save_checkpoint(dir + "/last", *f.model, f.state);
  rewrite(dir + "/last-5/last.safetensors",
          [](SafetensorsContents& s) { s.tensors["0.weight"] = s.tensors.at("0.weight").to(DType::i64); });
  auto m = f.fresh_model();
  std::string msg = error_of([&] { load_checkpoint(resolve_checkpoint(dir), *m); });
  EXPECT_NE(msg.find("last-5/last.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor '0.weight' is i64"), std::string::npos) << msg;
  msg = error_of([&] { load_weights(dir, *m); });
  EXPECT_NE(msg.find("tensor '0.weight' is i64"), std::string::npos) << msg;
  // F16 weights into f32 parameters still convert (a half-precision export), and a float counter is refused.
  rewrite(dir + "/last-5/last.safetensors", [](SafetensorsContents& s) {
    s.tensors["0.weight"] = s.tensors.at("0.weight").to(DType::f32).to(DType::f16);
    s.tensors["1.num_batches_tracked"] = s.tensors.at("1.num_batches_tracked").to(DType::f32);
  });
  msg = error_of([&] { load_weights(dir, *m); });
  EXPECT_NE(msg.find("tensor '1.num_batches_tracked' is f32"), std::string::npos) << msg;
  rewrite(dir + "/last-5/last.safetensors", [](SafetensorsContents& s) {
    s.tensors["1.num_batches_tracked"] = s.tensors.at("1.num_batches_tracked").to(DType::i64);
  });
  EXPECT_EQ(error_of([&] { load_weights(dir, *m); }), "");
  // Optimizer state is F32 only.
  rewrite(dir + "/last-5/last.state.safetensors", [](SafetensorsContents& s) {
    s.tensors["0.weight.momentum_buffer"] = s.tensors.at("0.weight.momentum_buffer").to(DType::i32);
  });
  msg = error_of([&] { load_checkpoint(resolve_checkpoint(dir), *m); });
  EXPECT_NE(msg.find("optimizer tensor '0.weight.momentum_buffer' is"), std::string::npos) << msg;
  EXPECT_NE(msg.find("last-5/last.state.safetensors"), std::string::npos) << msg;
}

// The issue's case: NaN in the convolution and batch-norm (relu used to turn it into 0s, and the
// loss stayed finite). A NaN conv weight gives a NaN loss...
TEST(Checkpoint, NanWeightsMakeTheLossNan) {
  Fixture f;
  auto m = f.fresh_model();
  Tensor w = m->state_dict().at("0.weight");
  w.data<float>()[0] = NAN;
  Tensor loss = ops::cross_entropy(m->forward(Tensor::ones({2, 8, 8, 3})),
                                   Tensor::from_vector(std::vector<int64_t>{0, 1}, {2}));
  EXPECT_TRUE(std::isnan(loss.item()));
}

// ... and in the trainer: weights that pass the load check (finite) but overflow to inf/NaN in the
// first convolution stop training with the non-finite-loss error instead of training on zeros.
TEST(Checkpoint, OverflowingWeightsStopTheTrainer) {
  std::string runs = fresh_dir("overflow");
  json cfg = json::parse(R"({
    "name": "overflow",
    "data": {"source": "synthetic", "synthetic": {"size": 32, "height": 8, "width": 8, "channels": 3, "num_classes": 3},
             "batch_size": 16, "workers": 1},
    "optim": {"name": "sgd", "lr": 0.01},
    "train": {"epochs": 1, "seed": 1, "plots": false}})");
  cfg["model"] = kModel;
  cfg["train"]["runs_dir"] = runs;
  TrainResult r = train(cfg, /*quiet=*/true);
  // The real file, not the flat-layout link (a rename over the link would replace the link).
  rewrite(checkpoint_files(resolve_checkpoint(r.run_dir)).weights, [](SafetensorsContents& s) {
    Tensor& w = s.tensors.at("0.weight");
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = (i % 2 ? -3e38f : 3e38f);
  });
  json again = cfg;
  apply_overrides(again, {"resume=" + r.run_dir, "epochs=2"});
  std::string msg = error_of([&] { train(again, true); });
  EXPECT_NE(msg.find("the loss became"), std::string::npos) << (msg.empty() ? "no error" : msg);
  EXPECT_NE(msg.find("nan at epoch 2, step 1"), std::string::npos) << msg;
}
