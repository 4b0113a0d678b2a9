// ONNX export (tools/onnx/onnx_export.h): the structure of every
// registry model's graph (checker, input/output shapes, initializers = the PyTorch state dict),
// metadata, refusals, and one graph evaluated by hand (`kiln export`: tests/cli/export_cmd_test.cpp). The numerics of every
// model against onnxruntime are tools/bench/onnx_compare.py's (Python stays out of the tests).
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
#include "tools/deploy/checkpoint.h"
#include "tools/onnx/onnx_export.h"
#include "tests/onnx/onnx_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
namespace ox = ONNX_NAMESPACE;
using kiln::testing::expect_error;

TEST(OnnxExport, EveryRegistryModelPassesTheCheckerWithStateDictInitializers) {
  for (const std::string& name : models::model_names()) {
    auto [c, side] = input_for(name);
    json cfg = {{"name", name}, {"in_channels", c}, {"num_classes", 7}};
    init::SkipInitGuard skip;  // names and shapes only: drawing VGG's 130M weights would take the time
    std::shared_ptr<Module> model = models::build_model(cfg);
    model->eval();
    OnnxExportOptions o{c, side, side, name, {{"kiln.model", name}}};
    ox::ModelProto m = parse(export_onnx(*model, o));
    check_structure(m, *model, c, side, 7);
    EXPECT_EQ(metadata(m, "kiln.model"), name);
  }
}

TEST(OnnxExport, SeResnetPassesTheCheckerWithEveryGateWeightUsed) {
  std::shared_ptr<Module> model = models::build_model({{"name", "resnet20"}, {"in_channels", 1}, {"se_reduction", 4}});
  model->eval();
  ox::ModelProto m = parse(export_onnx(*model, {1, 28, 28, "se", {}}));
  check_structure(m, *model, 1, 28, 10);  // the checker, and the initializers are exactly the state dict
  int sigmoids = 0, muls = 0;
  for (auto& n : m.graph().node()) sigmoids += n.op_type() == "Sigmoid", muls += n.op_type() == "Mul";
  EXPECT_EQ(sigmoids, 9);  // one gate per block
  EXPECT_EQ(muls, 9);
}

TEST(OnnxExport, WeightsAreThePyTorchLayoutValues) {
  // LeNet: conv weights OIHW, and the first linear's columns in (c, h, w) order for the NCHW graph.
  std::shared_ptr<Module> model = models::build_model({{"name", "lenet"}});
  model->eval();
  ox::ModelProto m = parse(export_onnx(*model, {1, 28, 28, "lenet", {}}));
  StateDict sd = export_pytorch_state_dict(*model);
  int checked = 0;
  for (auto& init : m.graph().initializer()) {
    if (init.name() != "features.0.weight" && init.name() != "classifier.0.weight") continue;
    const Tensor& want = sd.at(init.name());
    ASSERT_EQ(init.raw_data().size(), static_cast<size_t>(want.numel()) * 4);
    EXPECT_EQ(std::memcmp(init.raw_data().data(), want.raw_data(), init.raw_data().size()), 0) << init.name();
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// A layer the exporter does not know.
class Mystery : public Module {
 public:
  Mystery() : Module("mystery") {}
  Tensor forward(const Tensor& x) override { return x; }
  json to_json() const override { return {{"type", "mystery"}}; }
};

TEST(OnnxExport, UnsupportedLayersAreRefusedByPathAndType) {
  Sequential s;
  s.push_back(std::make_shared<ReLU>());
  s.push_back(std::make_shared<Mystery>());
  expect_error([&] { export_onnx(s, {3, 8, 8, "s", {}}); },
               {"onnx export: layer '1' of type 'mystery' is not supported", "supported: sequential, conv2d"});
  // LRN with an even window: ONNX centres it differently.
  std::shared_ptr<Module> lrn = models::build_model(json::parse(
      R"({"layers": [{"type": "local_response_norm", "size": 4}, {"type": "global_avg_pool"}]})"));
  expect_error([&] { export_onnx(*lrn, {3, 8, 8, "lrn", {}}); },
               {"local_response_norm '0' has size 4", "accepted: an odd size"});
  // A linear on a 4-D activation.
  std::shared_ptr<Module> lin = models::build_model(json::parse(
      R"({"layers": [{"type": "linear", "in_features": 3, "out_features": 2}]})"));
  expect_error([&] { export_onnx(*lin, {3, 8, 8, "lin", {}}); }, {"linear '0' takes (N, F) features", "add a flatten"});
}

// Evaluates a graph of Flatten, Gemm (transB = 1), Relu, Sigmoid and Mul nodes on an NCHW input, by hand.
std::vector<float> eval_by_hand(const ox::ModelProto& m, const std::vector<float>& input, int64_t batch) {
  std::map<std::string, std::pair<std::vector<float>, std::vector<int64_t>>> v;  // value -> (data, shape)
  for (auto& init : m.graph().initializer()) {
    std::vector<float> d(init.raw_data().size() / 4);
    std::memcpy(d.data(), init.raw_data().data(), init.raw_data().size());
    v[init.name()] = {d, std::vector<int64_t>(init.dims().begin(), init.dims().end())};
  }
  v["input"] = {input, {batch, static_cast<int64_t>(input.size()) / batch}};
  for (auto& n : m.graph().node()) {
    auto& x = v.at(n.input(0));
    if (n.op_type() == "Flatten") {
      v[n.output(0)] = {x.first, {batch, static_cast<int64_t>(x.first.size()) / batch}};
    } else if (n.op_type() == "Relu") {
      std::vector<float> y = x.first;
      for (float& e : y) e = std::max(e, 0.0f);
      v[n.output(0)] = {y, x.second};
    } else if (n.op_type() == "Sigmoid") {
      std::vector<float> y = x.first;
      for (float& e : y) e = static_cast<float>(1.0 / (1.0 + std::exp(-double(e))));
      v[n.output(0)] = {y, x.second};
    } else if (n.op_type() == "Mul") {
      const auto& b = v.at(n.input(1));
      std::vector<float> y = x.first;
      for (size_t i = 0; i < y.size(); ++i) y[i] *= b.first.at(i);
      v[n.output(0)] = {y, x.second};
    } else if (n.op_type() == "Gemm") {
      auto& w = v.at(n.input(1));
      auto& b = v.at(n.input(2));
      int64_t out = w.second[0], in = w.second[1];
      std::vector<float> y(static_cast<size_t>(batch * out));
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t o = 0; o < out; ++o) {
          double s = b.first[static_cast<size_t>(o)];
          for (int64_t k = 0; k < in; ++k) s += double(x.first[static_cast<size_t>(i * in + k)]) * w.first[static_cast<size_t>(o * in + k)];
          y[static_cast<size_t>(i * out + o)] = static_cast<float>(s);
        }
      v[n.output(0)] = {y, {batch, out}};
    } else {
      ADD_FAILURE() << "unexpected op " << n.op_type();
      return {};
    }
  }
  return v.at("logits").first;
}

TEST(OnnxExport, FlattenLinearGraphEvaluatedByHandGivesKilnsLogits) {
  // kiln's activations are NHWC, the graph's NCHW: kiln's flatten gives (c, h, w) order, as ONNX Flatten.
  std::shared_ptr<Module> model = models::build_model(json::parse(R"({"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 1},
      {"type": "flatten"}, {"type": "linear", "in_features": 24, "out_features": 5}, {"type": "relu"},
      {"type": "dropout"}, {"type": "linear", "in_features": 5, "out_features": 3}]})"));
  model->eval();
  // The conv is 1x1 with 3 -> 4 channels; drop it for the by-hand graph by exporting the classifier
  // part on its own input: run the whole model in kiln, and check the tail graph on the conv's output.
  Sequential& seq = dynamic_cast<Sequential&>(*model);
  NoGradGuard ng;
  Tensor x = rand_normal({2, 2, 3, 3}, 0, 1);          // NHWC (2, H=2, W=3, C=3)
  Tensor feat = seq[0]->forward(x);                    // (2, 2, 3, 4)
  Tensor want = (*model)(x).contiguous();
  auto tail = std::make_shared<Sequential>();
  for (size_t i = 1; i < seq.size(); ++i) tail->push_back(seq[i]);
  ox::ModelProto m = parse(export_onnx(*tail, {4, 2, 3, "tail", {}}));
  Tensor nchw = feat.permute({0, 3, 1, 2}).contiguous();
  std::vector<float> in(nchw.data<float>(), nchw.data<float>() + nchw.numel());
  std::vector<float> got = eval_by_hand(m, in, 2);
  ASSERT_EQ(got.size(), static_cast<size_t>(want.numel()));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want.data<float>()[i], 1e-5) << i;
}

TEST(OnnxExport, SiluIsSigmoidTimesItsInput) {
  std::shared_ptr<Module> model = models::build_model(json::parse(R"({"layers": [
      {"type": "flatten"}, {"type": "linear", "in_features": 12, "out_features": 6}, {"type": "silu"},
      {"type": "linear", "in_features": 6, "out_features": 3}]})"));
  model->eval();
  NoGradGuard ng;
  Tensor x = rand_normal({2, 2, 3, 2}, 0, 2);  // NHWC (2, H=2, W=3, C=2)
  Tensor want = (*model)(x).contiguous();
  ox::ModelProto m = parse(export_onnx(*model, {2, 2, 3, "silu", {}}));
  int sigmoids = 0, muls = 0;
  for (auto& n : m.graph().node()) sigmoids += n.op_type() == "Sigmoid", muls += n.op_type() == "Mul";
  EXPECT_EQ(sigmoids, 1);
  EXPECT_EQ(muls, 1);
  Tensor nchw = x.permute({0, 3, 1, 2}).contiguous();
  std::vector<float> got = eval_by_hand(m, std::vector<float>(nchw.data<float>(), nchw.data<float>() + nchw.numel()), 2);
  ASSERT_EQ(got.size(), static_cast<size_t>(want.numel()));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want.data<float>()[i], 1e-5) << i;
}
}  // namespace
}  // namespace kiln
