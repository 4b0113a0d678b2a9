// Golden tests: whole networks against PyTorch 1.13. The fixtures (tests/data/golden/*.json, made
// once by tests/data/golden/make_golden.py) hold random weights in PyTorch layout, an NCHW input,
// labels, eval-mode logits, train-mode logits, the cross-entropy loss, every parameter's gradient
// and the BN buffers after the training forward. kiln loads the weights through the PyTorch import
// (layers/interop.h), so conv layouts and the flatten->linear column order are checked too.
// Tolerance: |kiln - torch| <= 1e-4 * max|torch| over each tensor + 1e-6 (f32 sums in a different
// order; the values are O(1)).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/autograd.h"
#include "core/ops/loss.h"
#include "layers/interop.h"
#include "models/registry.h"

using namespace kiln;

namespace {
json load(const std::string& name) {
  std::ifstream f(std::string(KILN_TEST_DATA) + "/golden/" + name);
  EXPECT_TRUE(f.good()) << "missing fixture " << name;
  return json::parse(f);
}

Tensor tensor_of(const json& j) {
  Shape shape = j["shape"].get<Shape>();
  if (!j["data"].empty() && j["data"][0].is_number_integer() && shape.empty())
    return Tensor::from_vector(j["data"].get<std::vector<int64_t>>(), shape);
  return Tensor::from_vector(j["data"].get<std::vector<float>>(), shape, DType::f32);
}

void expect_matches(const Tensor& got, const json& want_j, const std::string& what) {
  std::vector<double> want = want_j["data"].get<std::vector<double>>();
  std::vector<double> g = got.to_double_vector();
  ASSERT_EQ(got.shape(), want_j["shape"].get<Shape>()) << what;
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  double tol = 1e-4 * scale + 1e-6;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (std::fabs(g[i] - want[i]) > worst) {
      worst = std::fabs(g[i] - want[i]);
      at = i;
    }
  EXPECT_LE(worst, tol) << what << ": element " << at << " is " << g[at] << ", PyTorch " << want[at] << " (max |torch| "
                        << scale << ")";
}

void run_golden(const std::string& fixture) {
  json f = load(fixture);
  auto model = models::build_model(f["model"]);
  StateDict sd;
  for (auto& [name, t] : f["state_dict"].items()) sd[name] = tensor_of(t);
  import_pytorch_state_dict(*model, sd);
  // NCHW -> NHWC
  Tensor x = tensor_of(f["input"]).permute({0, 2, 3, 1}).contiguous();
  Tensor labels = Tensor::from_vector(f["labels"].get<std::vector<int64_t>>(), {x.size(0)});

  model->eval();
  {
    NoGradGuard ng;
    expect_matches(model->forward(x), f["logits_eval"], fixture + " eval logits");
  }
  model->train();
  Tensor logits = model->forward(x);
  Tensor loss = ops::cross_entropy(logits, labels);
  expect_matches(logits, f["logits"], fixture + " train logits");
  EXPECT_NEAR(loss.item(), f["loss"].get<double>(), 1e-4 * std::max(1.0, f["loss"].get<double>())) << fixture;
  loss.backward();
  size_t n = 0;
  for (auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(f["grads"].contains(name)) << name;
    ASSERT_TRUE(p.grad().defined()) << name;
    expect_matches(to_pytorch_layout(*model, name, p.grad()), f["grads"][name], fixture + " grad " + name);
    ++n;
  }
  EXPECT_EQ(n, f["grads"].size());
  for (auto& [name, b] : model->named_buffers()) {
    if (b.dtype() == DType::i64) {
      EXPECT_EQ(b.to_int_vector(), f["buffers_after"][name]["data"].get<std::vector<int64_t>>()) << name;
      continue;
    }
    expect_matches(b, f["buffers_after"][name], fixture + " buffer " + name);
  }
}
}  // namespace

TEST(Golden, CifarResNetShortcutA) { run_golden("resnet_cifar_a.json"); }
// Width 2: the projection shortcuts are strided 1x1 convolutions with 2 and 4 input channels, the
// case oneDNN 2.6 gets wrong (see core/cpu/conv2d.cpp).
TEST(Golden, CifarResNetShortcutB) { run_golden("resnet_cifar_b.json"); }
// conv + BN + LRN + maxpool + grouped dilated conv + avgpool + flatten + linears.
TEST(Golden, CustomLayerList) { run_golden("custom_layers.json"); }
