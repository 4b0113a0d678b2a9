// Fine-tuning (docs/finetune.md): train.init (loading, the head rule, refusals), the converter's
// fixture (torchvision weights through tools/convert_weights.py, tests/fixtures/make_convert_fixture.py),
// train.freeze (frozen parameters and batch-norm statistics bit-identical, with SGD, AdamW and resume)
// and optim.lr_mult.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <filesystem>
#include <fstream>

#include "core/io/safetensors.h"
#include "core/ops/reduce.h"
#include "core/rng.h"
#include "layers/interop.h"
#include "layers/norm.h"
#include "models/registry.h"
#include "optim/optimizer.h"
#include "tests/expect_error.h"
#include "tools/deploy/config.h"
#include "tools/engine/finetune.h"
#include "tools/engine/trainer.h"

using namespace kiln;
using kiln::testing::expect_error;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/tiny_resnet";

json fixture_json() {
  std::ifstream f(kFixture + ".json");
  EXPECT_TRUE(f.good()) << "missing fixture " << kFixture << ".json";
  return json::parse(f);
}

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_finetune_" + name;
  fs::remove_all(d);
  return d;
}

// A small CIFAR ResNet with projection shortcuts on synthetic 8x8 images of 4 classes.
json small_config(const std::string& runs, const std::string& name) {
  json c = json::parse(R"({
    "model": {"name": "resnet_cifar", "depth": 8, "width": 4, "shortcut": "B", "num_classes": 4},
    "data": {"source": "synthetic", "synthetic": {"size": 128, "height": 8, "width": 8, "channels": 3, "num_classes": 4},
             "batch_size": 32, "workers": 1},
    "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3},
    "train": {"epochs": 1, "seed": 5, "plots": false}
  })");
  c["name"] = name;
  c["train"]["runs_dir"] = runs;
  return c;
}

StateDict weights_of(const std::string& run_dir) { return load_safetensors(run_dir + "/last.safetensors").tensors; }

bool under_any(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes)
    if (name_under(name, p)) return true;
  return false;
}

// Every tensor under `frozen` (parameters and BN buffers) bit-identical between `before` and
// `after`; every parameter outside changed.
void expect_frozen(const StateDict& before, const StateDict& after, const std::vector<std::string>& frozen) {
  int same = 0, changed = 0;
  for (auto& [name, t] : before) {
    ASSERT_TRUE(after.count(name)) << name;
    bool equal = t.to_double_vector() == after.at(name).to_double_vector();
    if (under_any(name, frozen)) {
      EXPECT_TRUE(equal) << name << " is frozen but changed";
      ++same;
    } else if (name.find("num_batches_tracked") == std::string::npos) {
      EXPECT_FALSE(equal) << name << " is trained but did not change";
      ++changed;
    }
  }
  EXPECT_GT(same, 8);  // conv1, bn1 (weight, bias, 3 buffers), layer1's block
  EXPECT_GT(changed, 8);
}

}  // namespace

// --- the converter's fixture: torchvision weights, torch's logits ------------------------------------------
// A converted torchvision model (`base`.safetensors) against its reference (`base`.json, written by
// tests/fixtures/make_convert_fixture.py): every torchvision name is a kiln name with the same
// PyTorch shape and value, nothing is left over, and the eval logits are torch's within
// 1e-4 * max|torch logit| (at least 1e-4). Returns the largest difference.
static double check_converted(const std::string& base) {
  std::ifstream in(base + ".json");
  EXPECT_TRUE(in.good()) << "missing " << base << ".json";
  json f = json::parse(in);
  auto model = models::build_model(f["model"]);
  SafetensorsContents c = load_safetensors(base + ".safetensors");
  InitReport r = import_pytorch_for_finetuning(*model, c.tensors, base + ".safetensors");
  EXPECT_EQ(r.loaded.size(), f["names"].size());
  EXPECT_TRUE(r.fresh.empty()) << join(r.fresh);
  EXPECT_TRUE(r.ignored.empty()) << join(r.ignored);
  StateDict own = model->state_dict();
  for (const auto& name : f["names"].get<std::vector<std::string>>()) {
    EXPECT_TRUE(own.count(name)) << name;
    if (!own.count(name)) continue;
    Tensor mine = to_pytorch_layout(*model, name, own.at(name));
    EXPECT_EQ(mine.shape(), f["shapes"][name].get<Shape>()) << name;
    EXPECT_EQ(mine.to_double_vector(), c.tensors.at(name).to_double_vector()) << name;
  }
  EXPECT_EQ(own.size(), f["names"].size());

  model->eval();
  Tensor x = Tensor::from_vector(f["input"]["data"].get<std::vector<float>>(), f["input"]["shape"].get<Shape>(), DType::f32)
                 .permute({0, 2, 3, 1})
                 .contiguous();
  std::vector<double> got = model->forward(x).to_double_vector();
  std::vector<double> want = f["logits_eval"]["data"].get<std::vector<double>>();
  EXPECT_EQ(got.size(), want.size());
  double scale = 1, worst = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LE(worst, 1e-4 * scale) << base;
  return worst;
}

TEST(Converter, TorchvisionResNetLoadsWithTorchsNamesShapesAndLogits) { check_converted(kFixture); }

// kiln's ImageNet registry models against torchvision's (random weights, converted by the script):
// the files are too large to commit; make them with
//   /usr/bin/python3 tests/fixtures/make_convert_fixture.py --registry DIR
// and run with KILN_CONVERT_CHECK=DIR.
TEST(Converter, RegistryModels) {
  const char* dir = std::getenv("KILN_CONVERT_CHECK");
  if (!dir) GTEST_SKIP() << "set KILN_CONVERT_CHECK (tests/fixtures/make_convert_fixture.py --registry DIR)";
  for (const char* name : {"resnet18", "resnet50", "alexnet", "vgg11", "vgg11_bn"}) {
    double worst = check_converted(std::string(dir) + "/" + name);
    std::cout << name << ": largest |kiln - torch| logit difference " << worst << "\n";
  }
}

// --- train.init: the head rule and the refusals ------------------------------------------------------------
TEST(Init, HeadIsTheLastLinear) {
  EXPECT_EQ(head_parameter_names(*models::build_model(json{{"name", "resnet18"}})),
            (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(head_parameter_names(*models::build_model(json{{"name", "resnet20"}})),
            (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(head_parameter_names(*models::build_model(json{{"name", "lenet"}})),
            (std::vector<std::string>{"classifier.3.weight", "classifier.3.bias"}));
}

TEST(Init, OtherNumClassesGetsAFreshHeadAndTheBackbone) {
  json f = fixture_json();
  json cfg = f["model"];
  cfg["num_classes"] = 5;
  manual_seed(7);
  auto fresh = models::build_model(cfg);
  manual_seed(7);
  auto model = models::build_model(cfg);
  SafetensorsContents c = load_safetensors(kFixture + ".safetensors");
  c.tensors["extra.weight"] = Tensor::ones({3});
  InitReport r = import_pytorch_for_finetuning(*model, c.tensors, "tiny.safetensors");
  EXPECT_EQ(r.fresh, (std::vector<std::string>{"fc.bias", "fc.weight"}));
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"extra.weight"}));
  EXPECT_EQ(r.loaded.size(), f["names"].size() - 2);
  StateDict own = model->state_dict(), init = fresh->state_dict();
  // The head is what a fresh model of that seed has; the backbone is the file's.
  EXPECT_EQ(own.at("fc.weight").to_double_vector(), init.at("fc.weight").to_double_vector());
  EXPECT_EQ(own.at("fc.bias").to_double_vector(), init.at("fc.bias").to_double_vector());
  EXPECT_EQ(own.at("bn1.running_var").to_double_vector(), c.tensors.at("bn1.running_var").to_double_vector());
  EXPECT_NE(own.at("bn1.running_var").to_double_vector(), init.at("bn1.running_var").to_double_vector());
}

TEST(Init, RefusesAnyOtherMismatchByName) {
  json f = fixture_json();
  SafetensorsContents c = load_safetensors(kFixture + ".safetensors");
  json wider = f["model"];
  wider["width"] = 16;
  auto model = models::build_model(wider);
  expect_error([&] { import_pytorch_for_finetuning(*model, c.tensors, "tiny.safetensors"); },
               {"tiny.safetensors", "conv1.weight is [8, 3, 3, 3] in the file, [16, 3, 3, 3] in the model"});
  StateDict missing = c.tensors;
  missing.erase("layer2.0.downsample.0.weight");
  auto same = models::build_model(f["model"]);
  expect_error([&] { import_pytorch_for_finetuning(*same, missing, "tiny.safetensors"); },
               {"tiny.safetensors", "layer2.0.downsample.0.weight is missing", "fc.weight"});
  // A missing BN counter is not a problem (timm files lack it): the fresh model's is kept.
  StateDict no_counter = c.tensors;
  no_counter.erase("bn1.num_batches_tracked");
  InitReport r = import_pytorch_for_finetuning(*same, no_counter, "tiny.safetensors");
  EXPECT_EQ(r.fresh, (std::vector<std::string>{"bn1.num_batches_tracked"}));
}

TEST(Init, TrainerLoadsARunFolderOrAFileAndRefusesByName) {
  std::string runs = fresh_dir("init");
  json f = fixture_json();
  // From the converted torchvision file: the training starts at its weights (checked through the
  // first checkpoint being close to them rather than to a fresh model's after 1 step at lr 1e-6).
  json c = small_config(runs, "from_file");
  c["model"] = f["model"];
  c["model"]["num_classes"] = 4;
  c["optim"] = json{{"name", "sgd"}, {"lr", 1e-6}};
  c["train"]["max_steps_per_epoch"] = 1;
  apply_overrides(c, {"train.init=" + kFixture + ".safetensors"});
  TrainResult r = train(c, true);
  StateDict got = weights_of(r.run_dir), file = load_safetensors(kFixture + ".safetensors").tensors;
  std::vector<double> a = got.at("layer3.0.conv2.weight").to_double_vector(), b = file.at("layer3.0.conv2.weight").to_double_vector();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LT(worst, 1e-5);
  // From a run folder (its best checkpoint); with the wrong model it is refused naming tensor and file.
  json again = small_config(runs, "from_run");
  again["model"] = c["model"];
  again["train"]["init"] = r.run_dir;
  again["train"]["max_steps_per_epoch"] = 1;
  again["optim"] = c["optim"];
  TrainResult r2 = train(again, true);
  EXPECT_LT(std::fabs(weights_of(r2.run_dir).at("bn1.weight").to_double_vector()[0] -
                      got.at("bn1.weight").to_double_vector()[0]), 1e-5);
  json wrong = small_config(runs, "wrong");  // width 4: every conv differs
  wrong["train"]["init"] = r.run_dir;
  expect_error([&] { train(wrong, true); }, {r.run_dir, "best", "conv1.weight is [8, 3, 3, 3] in the file, [4, 3, 3, 3]"});
}

// train.init_fresh: a head of the same size but for other classes starts fresh instead of loading.
TEST(Init, InitFreshKeepsNamedTensorsAtTheirFreshValues) {
  json f = fixture_json();
  manual_seed(7);
  auto fresh = models::build_model(f["model"]);
  manual_seed(7);
  auto model = models::build_model(f["model"]);
  SafetensorsContents c = load_safetensors(kFixture + ".safetensors");
  InitReport r = import_pytorch_for_finetuning(*model, c.tensors, "tiny.safetensors", {"fc", "layer3.0.bn1"});
  StateDict own = model->state_dict(), init = fresh->state_dict();
  for (const char* n : {"fc.weight", "fc.bias", "layer3.0.bn1.weight", "layer3.0.bn1.running_var"}) {
    EXPECT_EQ(own.at(n).to_double_vector(), init.at(n).to_double_vector()) << n;
    EXPECT_NE(std::find(r.fresh.begin(), r.fresh.end(), n), r.fresh.end()) << n;
  }
  EXPECT_EQ(own.at("layer3.0.bn2.running_var").to_double_vector(), c.tensors.at("layer3.0.bn2.running_var").to_double_vector());
  EXPECT_TRUE(r.ignored.empty());
  // Through the trainer: a prefix that matches nothing is refused, naming the key and the top-level modules.
  std::string runs = fresh_dir("init_fresh");
  json cfg = small_config(runs, "fresh");
  cfg["model"] = f["model"];
  cfg["train"]["init"] = kFixture + ".safetensors";
  cfg["train"]["init_fresh"] = json::array({"head"});
  expect_error([&] { train(cfg, true); }, {"train.init_fresh[0] = \"head\" matches no tensor", "fc"});
  cfg["train"]["init_fresh"] = "fc";
  expect_error([&] { train(cfg, true); }, {"train.init_fresh", "a list of parameter-name prefixes"});
}

// --- train.freeze --------------------------------------------------------------------------------------------
TEST(Freeze, FrozenParametersAndBatchNormStatisticsStayBitIdentical) {
  std::string runs = fresh_dir("freeze");
  TrainResult pre = train(small_config(runs, "pretrain"), true);  // "pre-trained": one epoch
  const std::vector<std::string> frozen = {"conv1", "bn1", "layer1"};
  for (const char* optim : {"sgd", "adamw"}) {
    json c = small_config(runs, std::string("tune_") + optim);
    c["train"]["init"] = pre.run_dir;
    c["train"]["freeze"] = frozen;
    c["train"]["epochs"] = 2;
    c["train"]["seed"] = 9;
    if (std::string(optim) == "adamw") c["optim"] = json{{"name", "adamw"}, {"lr", 1e-2}, {"weight_decay", 0.1}};
    TrainResult r = train(c, true);
    SCOPED_TRACE(optim);
    expect_frozen(weights_of(pre.run_dir), weights_of(r.run_dir), frozen);
    // The optimizer holds state for the trained parameters only.
    auto state = load_safetensors(r.run_dir + "/last.state.safetensors").tensors;
    for (auto& [key, t] : state) EXPECT_FALSE(under_any(key, frozen)) << key;
    EXPECT_FALSE(state.empty());
  }
}

TEST(Freeze, HoldsAcrossResume) {
  std::string runs = fresh_dir("freeze_resume");
  TrainResult pre = train(small_config(runs, "pretrain"), true);
  const std::vector<std::string> frozen = {"conv1", "bn1", "layer2.0"};
  json c = small_config(runs, "tune");
  c["train"]["init"] = pre.run_dir;
  c["train"]["freeze"] = frozen;
  c["train"]["epochs"] = 2;
  c["optim"]["lr_mult"] = json{{"layer1", 0.1}};
  json straight = c;
  straight["name"] = "straight";
  TrainResult s = train(straight, true);
  json first = c;
  first["train"]["stop_after"] = 1;
  TrainResult a = train(first, true);
  json second = c;
  second["train"]["resume"] = a.run_dir;
  TrainResult b = train(second, true);
  expect_frozen(weights_of(pre.run_dir), weights_of(b.run_dir), frozen);
  // Freezing and lr_mult are part of what resumes exactly.
  StateDict ws = weights_of(s.run_dir), wb = weights_of(b.run_dir);
  for (auto& [name, t] : ws) EXPECT_EQ(t.to_double_vector(), wb.at(name).to_double_vector()) << name;
  json as_run = json::parse(std::ifstream(b.run_dir + "/config.json"));
  EXPECT_EQ(as_run["train"]["freeze"], json(frozen));
  EXPECT_EQ(as_run["optim"]["lr_mult"], json({{"layer1", 0.1}}));
}

TEST(Freeze, FrozenBatchNormUsesRunningStatisticsInTraining) {
  BatchNormOptions o;
  o.num_features = 3;
  BatchNorm2d bn(o);
  copy_tensor(bn.running_mean, Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, DType::f32));
  copy_tensor(bn.running_var, Tensor::from_vector(std::vector<float>{4, 4, 4}, {3}, DType::f32));
  std::vector<std::string> frozen = freeze(bn, {"weight", "bias"}, "train.freeze");
  EXPECT_EQ(frozen, (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(bn.is_frozen());
  bn.train();
  Tensor x = Tensor::from_vector(std::vector<float>{3, 2, 1, 5, 6, 7}, {2, 3}, DType::f32).set_requires_grad(true);
  Tensor y = bn.forward(x);
  std::vector<double> v = y.to_double_vector();
  EXPECT_NEAR(v[0], (3 - 1) / std::sqrt(4 + 1e-5), 1e-6);
  EXPECT_NEAR(v[5], (7 - 3) / std::sqrt(4 + 1e-5), 1e-6);
  EXPECT_EQ(bn.running_mean.to_double_vector(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(bn.num_batches_tracked.to_double_vector(), (std::vector<double>{0}));
  ops::sum(y).backward();  // the gradient still reaches the input, not the frozen parameters
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(bn.weight.grad().defined());
}

TEST(Freeze, RefusesEntriesThatMatchNothingAndFreezingEverything) {
  std::string runs = fresh_dir("freeze_errors");
  json c = small_config(runs, "bad");
  c["train"]["freeze"] = json::array({"conv1", "layer9"});
  expect_error([&] { train(c, true); }, {"train.freeze[1] = \"layer9\" matches no parameter", "layer1", "fc"});
  c["train"]["freeze"] = json::array({"layer1.0.conv"});  // a prefix is whole name parts: not layer1.0.conv1
  expect_error([&] { train(c, true); }, {"train.freeze[0] = \"layer1.0.conv\""});
  c["train"]["freeze"] = json::array({"conv1", "bn1", "layer1", "layer2", "layer3", "fc"});
  expect_error([&] { train(c, true); }, {"freezes every parameter"});
  c["train"]["freeze"] = "conv1";
  expect_error([&] { train(c, true); }, {"train.freeze", "a list of parameter-name prefixes", "[\"backbone\"]"});
}

TEST(Freeze, TheLineCountsParametersNotTensors) {
  auto model = models::build_model(json{{"name", "lenet"}});
  int64_t frozen = 0, tensors = 0;  // features.1: the first batch norm's weight and bias
  for (auto& [name, p] : model->named_parameters())
    if (name.rfind("features.1.", 0) == 0) frozen += p.numel(), ++tensors;
  ASSERT_EQ(tensors, 2);
  std::vector<ParamRef> trained;
  ::testing::internal::CaptureStdout();
  std::string error;
  try {
    trained = trainable_params(*model, {"features.1"}, /*show=*/true);
  } catch (const Error& e) {
    error = e.what();
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(error, "");
  const std::string want = "freeze: " + std::to_string(frozen) + " parameters frozen (2 tensors under features.1), " +
                           std::to_string(model->num_parameters() - frozen) + " trained (" +
                           std::to_string(trained.size()) + " tensors)\n";
  EXPECT_EQ(out, want);
}

// "backbone": everything but the head (the last Linear), whatever the model calls it; the run's
// first line then counts the trainable parameters too.
TEST(Freeze, BackboneIsEverythingButTheHead) {
  for (const char* name : {"lenet", "resnet20", "alexnet"}) {
    SCOPED_TRACE(name);
    auto model = models::build_model(json{{"name", name}});
    const std::vector<std::string> head = head_parameter_names(*model);
    int64_t head_size = 0;
    for (auto& [n, p] : model->named_parameters())
      if (under_any(n, head)) head_size += p.numel();
    std::vector<ParamRef> trained = trainable_params(*model, {"backbone"}, false);
    std::vector<std::string> names;
    for (const ParamRef& p : trained) names.push_back(p.name);
    EXPECT_EQ(names, head);
    for (auto& [n, p] : model->named_parameters()) EXPECT_EQ(p.requires_grad(), under_any(n, head)) << n;
    EXPECT_LT(head_size, model->num_parameters());
  }
  // Another entry keeps its index in the errors; a model without a Linear has no head to leave out.
  auto lenet = models::build_model(json{{"name", "lenet"}});
  expect_error([&] { trainable_params(*lenet, {"backbone", "nothing"}, false); },
               {"train.freeze[1] = \"nothing\" matches no parameter"});
  expect_error([&] { trainable_params(*lenet, {"backbone", "classifier.3"}, false); }, {"freezes every parameter"});
  auto conv_only = models::build_model(json::parse(R"({"layers": [
      {"type": "conv2d", "in_channels": 1, "out_channels": 4, "kernel_size": 3}, {"type": "global_avg_pool"}]})"));
  expect_error([&] { trainable_params(*conv_only, {"backbone"}, false); },
               {"train.freeze[0] = \"backbone\"", "last Linear module", "has none"});
}

TEST(Freeze, BackboneRunTrainsTheHeadAloneAndSaysSo) {
  std::string runs = fresh_dir("freeze_backbone");
  TrainResult pre = train(small_config(runs, "pretrain"), true);
  json c = small_config(runs, "tune");
  c["train"]["init"] = pre.run_dir;
  c["train"]["freeze"] = json::array({"backbone"});
  ::testing::internal::CaptureStdout();
  TrainResult r;
  std::string error;
  try {
    r = train(c, false);
  } catch (const Error& e) {
    error = e.what();
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(error, "");
  auto model = models::build_model(c["model"]);
  const int64_t total = model->num_parameters();
  int64_t fc = 0;  // the head's scalars
  for (auto& [name, p] : model->named_parameters())
    if (name_under(name, "fc")) fc += p.numel();
  EXPECT_NE(out.find(", " + std::to_string(total) + " parameters (" + std::to_string(fc) + " trainable), batch"),
            std::string::npos) << out;
  EXPECT_NE(out.find("freeze: " + std::to_string(total - fc) + " parameters frozen ("), std::string::npos) << out;
  StateDict before = weights_of(pre.run_dir), after = weights_of(r.run_dir);
  for (auto& [name, t] : before) {
    const bool equal = t.to_double_vector() == after.at(name).to_double_vector();
    if (name_under(name, "fc")) EXPECT_FALSE(equal) << name;
    else EXPECT_TRUE(equal) << name << " is frozen but changed";  // batch-norm statistics too
  }
  // Without a frozen part the line counts no trainable parameters apart.
  ::testing::internal::CaptureStdout();
  train(small_config(runs, "plain"), false);
  EXPECT_EQ(::testing::internal::GetCapturedStdout().find(" trainable)"), std::string::npos);
}

TEST(Freeze, NameUnderIsByWholeParts) {
  EXPECT_TRUE(name_under("layer1.0.conv1.weight", "layer1"));
  EXPECT_TRUE(name_under("layer1", "layer1"));
  EXPECT_TRUE(name_under("fc.bias", "fc.bias"));
  EXPECT_FALSE(name_under("layer10.weight", "layer1"));
  EXPECT_FALSE(name_under("layer1.0.conv1.weight", "layer1.0.conv"));
}

// --- optim.lr_mult -----------------------------------------------------------------------------------------
namespace {
struct ThreeParams {
  std::vector<ParamRef> refs;
  std::vector<std::vector<double>> before;
  ThreeParams() {
    for (const char* n : {"backbone.a.weight", "backbone.b.weight", "head.weight"}) {
      Tensor p = Tensor::from_vector(std::vector<float>{1.0f, -2.0f, 0.5f}, {3}, DType::f32).set_requires_grad(true);
      p.set_grad(Tensor::from_vector(std::vector<float>{0.25f, 0.5f, -1.0f}, {3}, DType::f32));
      refs.push_back({n, p, false});
      before.push_back(p.to_double_vector());
    }
  }
  double delta(size_t i, size_t k) const { return refs[i].param.to_double_vector()[k] - before[i][k]; }
};
}  // namespace

TEST(LrMult, ScalesEachPartsUpdateUnderSgdAndAdamW) {
  ThreeParams t;
  auto sgd = make_optimizer(json::parse(R"({"name": "sgd", "lr": 0.5, "momentum": 0, "lr_mult": {"backbone": 0.1, "backbone.a": 0}})"),
                            t.refs, "optim");
  sgd->step();
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(t.delta(0, k), 0.0) << "lr_mult 0 (the longest prefix wins)";
    EXPECT_NEAR(t.delta(1, k) / t.delta(2, k), 0.1, 1e-4);
  }
  EXPECT_EQ(sgd->to_json()["lr_mult"], json::parse(R"({"backbone": 0.1, "backbone.a": 0})"));
  // The json round trip builds an equal optimizer.
  EXPECT_EQ(make_optimizer(sgd->to_json(), ThreeParams().refs, "optim")->to_json(), sgd->to_json());

  ThreeParams u;
  auto adamw = make_optimizer(json::parse(R"({"name": "adamw", "lr": 0.1, "weight_decay": 0.3, "lr_mult": {"backbone.a": 0}})"),
                              u.refs, "optim");
  adamw->step();
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(u.delta(0, k), 0.0) << "no update, no weight decay";
    EXPECT_NE(u.delta(1, k), 0.0);
  }
}

TEST(LrMult, RefusesUnknownPrefixesAndBadValues) {
  ThreeParams t;
  expect_error([&] { make_optimizer(json::parse(R"({"name": "sgd", "lr": 0.1, "lr_mult": {"features": 0.1}})"), t.refs, "optim"); },
               {"optim.lr_mult.\"features\" matches no parameter", "backbone, head"});
  expect_error([&] { make_optimizer(json::parse(R"({"name": "sgd", "lr": 0.1, "lr_mult": {"head": -1}})"), t.refs, "optim"); },
               {"optim.lr_mult.\"head\" = -1"});
  expect_error([&] { make_optimizer(json::parse(R"({"name": "sgd", "lr": 0.1, "lr_mult": [0.1]})"), t.refs, "optim"); },
               {"optim.lr_mult", "an object of parameter-name prefixes"});
}
