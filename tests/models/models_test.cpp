// Models: parameter counts against torchvision's, state-dict names and shapes against the PyTorch
// definitions in tests/data/golden/make_golden.py, forward shapes at small inputs, train/eval,
// JSON round trips and config errors.
#include <gtest/gtest.h>

#include <fstream>

#include "core/autograd.h"
#include "core/rng.h"
#include "layers/init.h"
#include "layers/interop.h"
#include "models/registry.h"
#include "tests/gradcheck.h"
#include "tests/layers/error_util.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::expect_has;
using kiln::testing::randn;

namespace {
std::shared_ptr<Module> build(const std::string& config) { return models::build_model(json::parse(config)); }
// Names, shapes and counts do not need random weights (VGG-16 would draw 138M numbers).
std::shared_ptr<Module> build_zero(const std::string& config) {
  init::SkipInitGuard skip;
  return build(config);
}

json load_fixture(const std::string& name) {
  std::ifstream f(std::string(KILN_TEST_DATA) + "/golden/" + name);
  EXPECT_TRUE(f.good()) << "missing fixture " << name;
  return json::parse(f);
}

// PyTorch's shape of a kiln tensor: conv weights (4-D) are OIHW there.
Shape torch_shape(const Shape& s) { return s.size() == 4 ? Shape{s[0], s[3], s[1], s[2]} : s; }
}  // namespace

// The numbers torchvision documents (and He et al.'s CIFAR ResNets with shortcut A).
TEST(Models, ParameterCountsMatchTorchvision) {
  const std::vector<std::pair<std::string, int64_t>> counts = {
      {"resnet18", 11689512}, {"resnet34", 21797672}, {"resnet50", 25557032}, {"resnet101", 44549160},
      {"alexnet", 61100840},  {"vgg11", 132863336},   {"vgg11_bn", 132868840}, {"vgg16", 138357544},
      {"vgg16_bn", 138365992}, {"resnet20", 269722},  {"resnet32", 464154},   {"resnet56", 853018},
  };
  json fixture = load_fixture("torchvision_names.json");
  for (auto& [name, n] : counts) {
    auto m = build_zero("{\"name\": \"" + name + "\"}");
    EXPECT_EQ(m->num_parameters(), n) << name;
    EXPECT_EQ(fixture["counts"][name].get<int64_t>(), n) << name << " in the fixture";
  }
  EXPECT_EQ(build_zero(R"({"name": "lenet"})")->num_parameters(), fixture["counts"]["lenet"].get<int64_t>());
}

TEST(Models, StateDictNamesAndShapesMatchPyTorch) {
  json fixture = load_fixture("torchvision_names.json");
  for (auto& [name, entries] : fixture["names"].items()) {
    auto m = build_zero("{\"name\": \"" + name + "\"}");
    NamedTensors all = m->named_parameters();
    // torch's state_dict order: each module's parameters then its buffers; compare as sets of
    // (name, shape) plus the parameter order.
    std::map<std::string, Shape> ours;
    for (auto& kv : m->named_parameters()) ours[kv.first] = torch_shape(kv.second.shape());
    for (auto& kv : m->named_buffers()) ours[kv.first] = kv.second.shape();
    std::map<std::string, Shape> theirs;
    std::vector<std::string> their_params;
    for (auto& e : entries) {
      std::string n = e[0].get<std::string>();
      theirs[n] = e[1].get<Shape>();
      if (n.find("running_") == std::string::npos && n.find("num_batches_tracked") == std::string::npos)
        their_params.push_back(n);
    }
    EXPECT_EQ(ours, theirs) << name;
    std::vector<std::string> our_params;
    for (auto& kv : all) our_params.push_back(kv.first);
    EXPECT_EQ(our_params, their_params) << name;
  }
}

TEST(Models, ForwardShapesAtSmallInputs) {
  const std::vector<std::tuple<std::string, Shape, Shape>> cases = {
      {R"({"name": "lenet"})", {2, 28, 28, 1}, {2, 10}},
      {R"({"name": "lenet", "input_size": 32, "in_channels": 3, "num_classes": 4})", {1, 32, 32, 3}, {1, 4}},
      {R"({"name": "alexnet", "num_classes": 10})", {1, 64, 64, 3}, {1, 10}},
      {R"({"name": "alexnet", "lrn": true, "num_classes": 7})", {1, 64, 64, 3}, {1, 7}},
      {R"({"name": "vgg11_bn", "num_classes": 10})", {1, 32, 32, 3}, {1, 10}},
      {R"({"name": "resnet18", "in_channels": 1})", {1, 32, 32, 1}, {1, 1000}},
      {R"({"name": "resnet50", "num_classes": 5})", {2, 32, 32, 3}, {2, 5}},
      {R"({"name": "resnet20"})", {2, 32, 32, 3}, {2, 10}},
      {R"({"name": "resnet18", "stem": "cifar", "num_classes": 10})", {2, 32, 32, 3}, {2, 10}},
      {R"({"name": "resnet_cifar", "depth": 8, "shortcut": "B", "width": 8})", {2, 16, 16, 3}, {2, 10}},
  };
  NoGradGuard ng;
  for (auto& [config, in, out] : cases) {
    auto m = build_zero(config);  // shapes only
    m->eval();  // batch 1 at 1x1 spatial cannot train BN (as in PyTorch)
    EXPECT_EQ(m->forward(randn(in, 2)).shape(), out) << config;
  }
}

TEST(Models, CifarStemResnet18) {
  // The ResNet-18 of CIFAR benchmarks: 3x3/1 stem, no maxpool; 11,173,962 parameters at 10 classes.
  auto m = build_zero(R"({"name": "resnet18", "stem": "cifar", "num_classes": 10})");
  EXPECT_EQ(m->num_parameters(), 11173962);
  EXPECT_EQ(m->state_dict().at("conv1.weight").shape(), (Shape{64, 3, 3, 3}));
  EXPECT_EQ(m->to_json().at("stem"), "cifar");
  expect_has(error_of([] { build(R"({"name": "resnet18", "stem": "tiny"})"); }), "model.stem");
  expect_has(error_of([] { build(R"({"name": "resnet20", "stem": "cifar"})"); }), "unknown key model.stem");
}

TEST(Models, Resnet18At224) {
  NoGradGuard ng;
  auto m = build(R"({"name": "resnet18"})");
  m->eval();
  EXPECT_EQ(m->forward(randn({1, 224, 224, 3}, 3)).shape(), (Shape{1, 1000}));
}

TEST(Models, WrongInputIsAClearError) {
  auto m = build(R"({"name": "lenet"})");
  expect_has(error_of([&] { m->forward(randn({1, 28, 28, 3}, 1)); }), "lenet: input f32[1, 28, 28, 3] on cpu must be NHWC images (N, H, W, 1)");
  expect_has(error_of([&] { m->forward(randn({1, 32, 32, 1}, 1)); }), "check the input image size");
  auto r = build(R"({"name": "resnet20"})");
  expect_has(error_of([&] { r->forward(randn({1, 3, 32, 32}, 1)); }), "resnet20: input");
}

TEST(Models, EvalIsDeterministicAndLeavesStatistics) {
  manual_seed(5);
  auto m = build(R"({"name": "lenet"})");
  Tensor x = randn({4, 28, 28, 1}, 6);
  m->eval();
  StateDict before = m->state_dict();
  std::vector<std::vector<double>> saved;
  for (auto& kv : before) saved.push_back(kv.second.to_double_vector());
  auto y1 = m->forward(x).to_double_vector();
  auto y2 = m->forward(x).to_double_vector();
  EXPECT_EQ(y1, y2);
  size_t i = 0;
  for (auto& kv : m->state_dict()) EXPECT_EQ(kv.second.to_double_vector(), saved[i++]) << kv.first;
  // Training mode: dropout draws new masks and BN updates its statistics.
  m->train();
  auto t1 = m->forward(x).to_double_vector();
  auto t2 = m->forward(x).to_double_vector();
  EXPECT_NE(t1, t2);
  EXPECT_EQ(m->state_dict()["features.1.num_batches_tracked"].to_int_vector(), std::vector<int64_t>{2});
}

// SE-ResNet (model.se_reduction): each block gains fc1 (C -> max(1, C / r)) and fc2 (back to C) with biases.
TEST(Models, SeResnetAddsTheGatesParameters) {
  // resnet20: stages of 3 blocks at 16, 32, 64 channels; r = 4: 4, 8, 16 hidden; r = 16: 1, 2, 4.
  auto se_params = [](int64_t c, int64_t h) { return 3 * (c * h + h + h * c + c); };
  EXPECT_EQ(build_zero(R"({"name": "resnet20", "se_reduction": 4})")->num_parameters(),
            269722 + se_params(16, 4) + se_params(32, 8) + se_params(64, 16));
  auto m = build_zero(R"({"name": "resnet20", "se_reduction": 16})");
  EXPECT_EQ(m->num_parameters(), 269722 + se_params(16, 1) + se_params(32, 2) + se_params(64, 4));
  bool found = false;
  for (auto& [name, p] : m->named_parameters())
    if (name == "layer3.2.se.fc2.weight") {
      found = true;
      EXPECT_EQ(p.shape(), (Shape{64, 4}));
    }
  EXPECT_TRUE(found);
  json j = m->to_json();
  EXPECT_EQ(j["se_reduction"], 16);
  EXPECT_EQ(models::build_model(j)->to_json(), j);
  EXPECT_FALSE(build_zero(R"({"name": "resnet20"})")->to_json().contains("se_reduction"));
  auto r50 = build_zero(R"({"name": "resnet50", "se_reduction": 16, "num_classes": 10})");  // bottlenecks: 4C channels
  EXPECT_EQ(r50->named_parameters().size(), build_zero(R"({"name": "resnet50", "num_classes": 10})")->named_parameters().size() + 16 * 4);
  expect_has(error_of([] { build(R"({"name": "resnet20", "se_reduction": -1})"); }), "model.se_reduction = -1 is out of range");
}

TEST(Models, JsonRoundTrip) {
  for (const std::string& name : models::model_names()) {
    if (name.rfind("vgg", 0) == 0 && name != "vgg11") continue;  // the big ones are the same code
    if (name == "resnet101" || name == "resnet152" || name == "resnet110") continue;
    json config = {{"name", name}};
    if (name.rfind("resnet", 0) == 0 || name == "alexnet" || name == "vgg11") config["num_classes"] = 10;
    init::SkipInitGuard skip;
    auto m = models::build_model(config);
    json j = m->to_json();
    EXPECT_EQ(j["name"], name);
    auto again = models::build_model(j);
    EXPECT_EQ(again->to_json(), j) << name;
    EXPECT_EQ(again->num_parameters(), m->num_parameters()) << name;
  }
  json custom = json::parse(R"({"layers": [{"type": "conv2d", "in_channels": 1, "out_channels": 2, "kernel_size": 3},
                                           {"type": "global_avg_pool"}], "checkpoint": "every:2"})");
  auto m = models::build_model(custom);
  EXPECT_EQ(m->type(), "custom");
  EXPECT_EQ(m->named_parameters()[0].first, "0.weight");
  EXPECT_EQ(models::build_model(m->to_json())->to_json(), m->to_json());
  EXPECT_EQ(m->to_json()["checkpoint"], "every:2");
}

TEST(Models, SameSeedSameWeights) {
  manual_seed(9);
  auto a = build(R"({"name": "resnet20"})");
  manual_seed(9);
  auto b = build(R"({"name": "resnet20"})");
  for (auto& [name, t] : a->state_dict()) EXPECT_EQ(t.to_double_vector(), b->state_dict()[name].to_double_vector()) << name;
}

TEST(Models, InitFollowsTorchvision) {
  manual_seed(10);
  auto r = build(R"({"name": "resnet20", "zero_init_residual": true})");
  StateDict sd = r->state_dict();
  EXPECT_EQ(sd["layer1.0.bn2.weight"].to_double_vector(), std::vector<double>(16, 0.0));
  EXPECT_EQ(sd["layer1.0.bn1.weight"].to_double_vector(), std::vector<double>(16, 1.0));
  auto v = build_zero(R"({"name": "vgg11", "num_classes": 10})");
  EXPECT_EQ(v->submodule("features.0").to_json()["init"], "kaiming_normal");
  EXPECT_EQ(v->submodule("classifier.0").to_json()["init"], "normal");
  EXPECT_EQ(v->submodule("classifier.6").to_json()["init"], "normal");
  auto a = build_zero(R"({"name": "alexnet"})");
  EXPECT_EQ(a->submodule("features.0").to_json()["init"], "default");
  EXPECT_EQ(r->submodule("conv1").to_json()["init"], "kaiming_normal");
  EXPECT_EQ(r->submodule("layer2.0.conv1").to_json()["init"], "kaiming_normal");
  EXPECT_EQ(r->submodule("fc").to_json()["init"], "default");
}

TEST(Models, ConfigErrors) {
  expect_has(error_of([] { build(R"({"name": "resnt50"})"); }), "model.name = \"resnt50\" is not a model (did you mean \"resnet50\"?)");
  expect_has(error_of([] { build(R"({"name": "resnet18", "num_clases": 10})"); }),
             "unknown key model.num_clases (did you mean model.num_classes?)");
  expect_has(error_of([] { build(R"({"name": "resnet18", "depth": 20})"); }), "unknown key model.depth");
  expect_has(error_of([] { build(R"({"name": "resnet_cifar", "depth": 21})"); }), "model.depth = 21 is not accepted; accepted: 6n+2");
  expect_has(error_of([] { build(R"({"name": "resnet20", "shortcut": "C"})"); }), "model.shortcut = \"C\" is not accepted");
  expect_has(error_of([] { build(R"({"name": "vgg16", "checkpoint": "every:0"})"); }),
             "model.checkpoint = \"every:0\" is not accepted; accepted: \"none\", \"blocks\", \"every:K\"");
  expect_has(error_of([] { build(R"({"name": "lenet", "num_classes": 0})"); }), "model.num_classes = 0 is out of range");
  expect_has(error_of([] { build(R"({"num_classes": 10})"); }), "model.name is required");
  expect_has(error_of([] { build(R"({"layers": [{"type": "relu"}, {"type": "maxpool2d", "kernel_size": 2}]})"); }),
             "model.layers[1].type = \"maxpool2d\" is not a layer type (did you mean \"max_pool2d\"?)");
  expect_has(error_of([] { build(R"({"layers": [{"type": "relu"}], "checkpoint": "all"})"); }), "model.checkpoint = \"all\"");
  expect_has(error_of([] { build(R"({"layers": [{"type": "relu"}], "num_classes": 3})"); }), "unknown key model.num_classes");
}

TEST(Models, PyTorchStateDictRoundTripKeepsOutputs) {
  manual_seed(11);
  auto a = build(R"({"name": "alexnet", "num_classes": 10})");
  auto b = build_zero(R"({"name": "alexnet", "num_classes": 10})");
  StateDict sd = export_pytorch_state_dict(*a);
  EXPECT_EQ(sd["features.0.weight"].shape(), (Shape{64, 3, 11, 11}));
  EXPECT_EQ(sd["classifier.1.weight"].shape(), (Shape{4096, 9216}));
  import_pytorch_state_dict(*b, sd);
  a->eval();
  b->eval();
  NoGradGuard ng;
  Tensor x = randn({1, 64, 64, 3}, 13);
  EXPECT_EQ(a->forward(x).to_double_vector(), b->forward(x).to_double_vector());
}
