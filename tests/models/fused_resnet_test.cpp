// model.fused_bn_conv on a whole ResNet (resnet50 and resnet18, 10 classes, batch 4 of 64x64 images)
// against the same network without it, on the CPU, over 3 SGD steps.
//
// How close is "the same" for a whole ResNet-50: its gradients are not a smooth function of the input
// at f32 resolution. A ReLU whose input lies within rounding of 0 flips, and with the few values per
// channel of the last stages (16 here) one flipped element moves that channel's batch-norm gradients
// by several percent. Measured here: the PLAIN network, fed its input scaled by (1 + 1e-7) (the
// "control"), changes its gradients by ~3% (relative L2 norm over all parameters; single elements by
// up to 20%), and after one SGD step (lr 1e-5) its logits by ~20%. So the fused path cannot be held to
// element-wise f32 tolerances on this network (the block-level test, tests/layers/fused_bottleneck_test.cpp,
// holds 1e-4 element-wise on every tensor), and this test compares it with the control instead: at
// each step the logits, all gradients together and the running statistics (worst buffer) must be
// within 3x the control's relative L2 distance to the plain network (+ 1e-4); num_batches_tracked
// equal; the first step's logits element-wise within 1e-3 (seen: 4e-5 relative L2). Seen: fused 0.020
// vs control 0.029 on the first step's gradients; dropping the sumsq gradient term (2y) from the
// fused op gives 0.49 there and fails. Eval mode after training: the same comparison. The config
// key's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "models/registry.h"
#include "tests/gradcheck.h"
#include "tests/layers/error_util.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::expect_has;
using kiln::testing::randn;

namespace {

constexpr double kTol = 1e-3;
constexpr double kLr = 1e-5;  // small: the summed-logit loss gives gradients up to ~100

void expect_near_all(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
  double scale = 0;
  for (double v : w) scale = std::max(scale, std::fabs(v));
  kiln::testing::expect_close(g, w, kTol * scale, kTol, what);
}

std::map<std::string, Tensor> by_name(const NamedTensors& v) { return {v.begin(), v.end()}; }

// |grads of m - grads of ref|_2 / |grads of ref|_2 over all parameters together.
double grad_rel_l2(const Module& m, const Module& ref) {
  auto mp = by_name(m.named_parameters());
  double d = 0, n = 0;
  for (auto& [name, t] : ref.named_parameters()) {
    const std::vector<double> g = mp.at(name).grad().to_double_vector(), w = t.grad().to_double_vector();
    for (size_t i = 0; i < w.size(); ++i) d += (g[i] - w[i]) * (g[i] - w[i]), n += w[i] * w[i];
  }
  return std::sqrt(d / n);
}

double rel_l2(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
  double d = 0, n = 0;
  for (size_t i = 0; i < w.size(); ++i) d += (g[i] - w[i]) * (g[i] - w[i]), n += w[i] * w[i];
  return std::sqrt(d / n);
}

// The same over the f32 buffers (running means and variances), each relative to its own norm, worst.
double buffers_rel_l2(const Module& m, const Module& ref) {
  auto mb = by_name(m.named_buffers());
  double worst = 0;
  for (auto& [name, t] : ref.named_buffers())
    if (t.dtype() == DType::f32) worst = std::max(worst, rel_l2(mb.at(name), t));
  return worst;
}

std::shared_ptr<Module> copy_of(const Module& from, const std::string& config) {
  auto m = models::build_model(json::parse(config));
  NoGradGuard ng;
  auto p = by_name(m->named_parameters()), b = by_name(m->named_buffers());
  for (auto& [name, t] : from.named_parameters()) copy_tensor(p.at(name), t);
  for (auto& [name, t] : from.named_buffers()) copy_tensor(b.at(name), t);
  return m;
}

}  // namespace

namespace {

// floor: added to 3x the control's distance. A network as smooth as ResNet-18 has a control distance
// of ~5e-6, and one ReLU of the fused chain flipping where the plain batch norm's did not (inputs
// within rounding of 0, computed as y*scale + bias against (y - mean)*invstd*gamma + beta) moves that
// channel's batch-norm gradients: with 16 values per channel in the last stage, 7.6e-4 over all the
// gradients (seen at step 1 after other tests had drawn from the generator). A bug is far above the
// floor: without the 2y term, ResNet-18's first gradients are 0.645 away.
void trains_as_without_the_switch(const std::string& name, double floor) {
  const std::string base = R"({"name": ")" + name + R"(", "num_classes": 10)";
  auto plain = models::build_model(json::parse(base + "}"));
  auto control = copy_of(*plain, base + "}");
  auto fused = copy_of(*plain, base + R"(, "fused_bn_conv": true})");
  EXPECT_EQ(fused->to_json().at("fused_bn_conv"), true);
  EXPECT_EQ(plain->to_json().at("fused_bn_conv"), false);
  for (Module* m : {plain.get(), control.get(), fused.get()}) m->train();
  // fused within 3x the control's distance to plain (+ a floor for what the control happens to match
  // exactly): the comparison every check below makes.
  auto within_noise = [floor](double err, double noise, const std::string& what) {
    std::printf("%s: relative L2 difference to plain: fused %.3g, control %.3g\n", what.c_str(), err, noise);
    EXPECT_LE(err, 3 * noise + floor) << what << ": fused " << err << ", control " << noise;
  };
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Tensor x = randn({4, 64, 64, 3}, 60 + step), r = randn({4, 10}, 70 + step);
    auto run = [&](Module& m, const Tensor& in) {
      Tensor y = m.forward(in);
      ops::sum(ops::mul(y, r)).backward();
      return y;
    };
    const Tensor ya = run(*plain, x), yb = run(*fused, x), yc = run(*control, ops::mul_scalar(x, 1.0 + 1e-7));
    const std::string at = "step " + std::to_string(step) + " ";
    if (step == 0) expect_near_all(yb, ya, "logits");  // the same weights: smooth in the input
    within_noise(rel_l2(yb, ya), rel_l2(yc, ya), at + "logits");
    within_noise(grad_rel_l2(*fused, *plain), grad_rel_l2(*control, *plain), at + "gradients");
    within_noise(buffers_rel_l2(*fused, *plain), buffers_rel_l2(*control, *plain), at + "running statistics");
    auto fb = by_name(fused->named_buffers());
    for (auto& [name, t] : plain->named_buffers())
      if (t.dtype() == DType::i64) EXPECT_EQ(fb.at(name).to_double_vector(), t.to_double_vector()) << name;
    NoGradGuard ng;
    for (Module* m : {plain.get(), control.get(), fused.get()}) {
      for (Tensor& t : m->parameters()) copy_tensor(t, ops::sub(t.detach(), ops::mul_scalar(t.grad(), kLr)));
      m->zero_grad();
    }
  }
  for (Module* m : {plain.get(), control.get(), fused.get()}) m->eval();
  const Tensor x = randn({2, 64, 64, 3}, 80);
  const Tensor ya = plain->forward(x);
  within_noise(rel_l2(fused->forward(x), ya), rel_l2(control->forward(x), ya), "eval logits");
}

}  // namespace

TEST(FusedResNet, Resnet50TrainsAsWithoutTheSwitch) { trains_as_without_the_switch("resnet50", 1e-4); }

// Basic blocks: conv1 with its sums (the identity prologue), bn1 finalized, conv2 through the fused op.
TEST(FusedResNet, Resnet18TrainsAsWithoutTheSwitch) { trains_as_without_the_switch("resnet18", 5e-3); }

TEST(FusedResNet, SwitchIsForTheImageNetLayouts) {
  for (const char* name : {"resnet18", "resnet34", "resnet50"}) {
    auto m = models::build_model(json::parse(std::string(R"({"name": ")") + name + R"(", "fused_bn_conv": true})"));
    EXPECT_EQ(m->to_json().at("fused_bn_conv"), true) << name;
  }
  // The CIFAR layouts do not know the key.
  expect_has(error_of([] { models::build_model(json::parse(R"({"name": "resnet20", "fused_bn_conv": true})")); }),
             "unknown key model.fused_bn_conv");
  expect_has(error_of([] { models::build_model(json::parse(R"({"name": "resnet50", "fused_bn_conv": 1})")); }),
             "model.fused_bn_conv");
}

// Gradient checkpointing over the blocks re-runs each fused block's forward in backward: the same
// gradients bit for bit as without checkpointing, and the running statistics and num_batches_tracked
// updated once (the recomputation leaves them alone).
TEST(FusedResNet, CheckpointedBlocksRecomputeWithoutUpdatingStatisticsTwice) {
  auto plain = models::build_model(json::parse(R"({"name": "resnet50", "num_classes": 10, "fused_bn_conv": true})"));
  auto ckpt = copy_of(*plain, R"({"name": "resnet50", "num_classes": 10, "fused_bn_conv": true, "checkpoint": "blocks"})");
  plain->train();
  ckpt->train();
  const Tensor x = randn({2, 64, 64, 3}, 90), r = randn({2, 10}, 91);
  ops::sum(ops::mul(plain->forward(x), r)).backward();
  ops::sum(ops::mul(ckpt->forward(x), r)).backward();
  auto cp = by_name(ckpt->named_parameters()), cb = by_name(ckpt->named_buffers());
  for (auto& [name, t] : plain->named_parameters())
    EXPECT_EQ(cp.at(name).grad().to_double_vector(), t.grad().to_double_vector()) << name;
  for (auto& [name, t] : plain->named_buffers())
    EXPECT_EQ(cb.at(name).to_double_vector(), t.to_double_vector()) << name;
  EXPECT_EQ(cb.at("layer1.0.bn1.num_batches_tracked").to_double_vector(), std::vector<double>{1});
}
