// SGD, AdamW, clip_grad_norm and schedules against values produced once by PyTorch 1.13 with
// tests/optim/make_torch_reference.py (pasted below). Inputs are sin/cos in double rounded to f32,
// built here exactly as in the script. PyTorch's CPU kernels fuse some multiply-adds: when this
// was written AdamW matched bit for bit and SGD within one f32 ulp, hence the tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::values;

namespace {

std::vector<float> param0(int n) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<float>(std::sin(i + 1.0)));
  return v;
}
std::vector<float> grad_at(int n, int t) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<float>(std::cos(0.7 * i + t) * (t + 1) * 0.1));
  return v;
}

// w (3, 4) and b (4) as in the script (b = param0(4) reversed); b is no_decay when asked.
std::vector<ParamRef> make_params(bool bias_no_decay) {
  auto bv = param0(4);
  std::reverse(bv.begin(), bv.end());
  return {kiln::testing::make_param("w", param0(12), {3, 4}), kiln::testing::make_param("b", bv, {4}, bias_no_decay)};
}

void run(Optimizer& opt, std::vector<ParamRef>& ps, int steps) {
  for (int t = 0; t < steps; ++t) {
    kiln::testing::set_grad(ps[0], grad_at(12, t));
    kiln::testing::set_grad(ps[1], grad_at(4, t + 10));
    opt.step();
  }
}

constexpr double kTol = 2e-7;

}  // namespace

TEST(TorchReference, SGDNesterovWeightDecayBiasNoDecay) {
  auto ps = make_params(true);
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 0.01;
  o.no_decay_bn_bias = true;
  SGD opt(ps, o);
  run(opt, ps, 3);
  expect_close(values(ps[0]),
               {0.794897556f, 0.934273064f, 0.229179397f, -0.646565855f, -0.881087244f, -0.274046242f, 0.586354554f,
                0.878314972f, 0.316459358f, -0.57781899f, -0.957994223f, -0.442142874f},
               kTol, "w");
  expect_close(values(ps[1]), {-0.649261296f, -0.204084456f, 0.273702323f, 0.214415535f}, kTol, "b");
}

TEST(TorchReference, SGDDampening) {
  auto ps = make_params(false);
  SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.8;
  o.dampening = 0.3;
  o.weight_decay = 0.001;
  SGD opt(ps, o);
  run(opt, ps, 3);
  expect_close(values(ps[0]),
               {0.826648355f, 0.91088295f, 0.158457831f, -0.73185277f, -0.938171566f, -0.272714883f, 0.646456063f,
                0.966614127f, 0.387955487f, -0.558198094f, -0.997567296f, -0.518788397f},
               kTol, "w");
  expect_close(values(ps[1]), {-0.682768345f, 0.0861262754f, 0.751154184f, 0.654645205f}, kTol, "b");
}

TEST(TorchReference, AdamWBiasNoDecay) {
  auto ps = make_params(true);
  AdamWOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.1;
  o.no_decay_bn_bias = true;
  AdamW opt(ps, o);
  run(opt, ps, 3);
  expect_close(values(ps[0]),
               {0.817198217f, 0.897871852f, 0.145355925f, -0.726358473f, -0.929644704f, -0.262115479f, 0.654590249f,
                0.959483683f, 0.382453144f, -0.563891351f, -1.0051949f, -0.530165732f},
               kTol, "w");
  expect_close(values(ps[1]), {-0.741723657f, 0.139615089f, 0.880466282f, 0.813511312f}, kTol, "b");
}

TEST(TorchReference, AdamWAmsgrad) {
  auto ps = make_params(false);
  AdamWOptions o;
  o.lr = 0.003;
  o.betas = {0.8, 0.99};
  o.eps = 1e-6;
  o.weight_decay = 0.05;
  o.amsgrad = true;
  AdamW opt(ps, o);
  run(opt, ps, 4);
  expect_close(values(ps[0]),
               {0.83639878f, 0.908979177f, 0.145307913f, -0.746801138f, -0.951664925f, -0.276778549f, 0.653468251f,
                0.978436828f, 0.403575629f, -0.548158526f, -0.998999298f, -0.531951666f},
               kTol, "w");
  expect_close(values(ps[1]), {-0.754017711f, 0.137816086f, 0.898292661f, 0.832661986f}, kTol, "b");
}

TEST(TorchReference, ClipGradNorm) {
  std::vector<ParamRef> ps = {kiln::testing::make_param("w", std::vector<float>(12, 0.0f), {3, 4}),
                              kiln::testing::make_param("b", std::vector<float>(4, 0.0f))};
  kiln::testing::set_grad(ps[0], grad_at(12, 2));
  kiln::testing::set_grad(ps[1], grad_at(4, 12));
  double norm = clip_grad_norm(ps, 0.5);
  EXPECT_NEAR(norm, 2.05135083, 1e-6);
  expect_close(ps[0].param.grad().to_float_vector(),
               {-0.0304297041f, -0.0661080256f, -0.0706947148f, -0.0420325734f, 0.00639814604f, 0.0518197156f,
                0.0728696659f, 0.0596478693f, 0.0183727536f, -0.0315433592f, -0.0666241422f, -0.07037054f},
               kTol, "w.grad");
  expect_close(ps[1].param.grad().to_float_vector(), {0.267387152f, 0.31403935f, 0.21299395f, 0.0117741628f}, kTol,
               "b.grad");
}

TEST(TorchReference, CosinePerIteration) {
  // CosineAnnealingLR(T_max=200, eta_min=0.001) stepped per iteration = 20 epochs of 10 steps.
  CosineLROptions o;
  o.min_lr = 0.001;
  CosineLR s({0.1, 10, 20}, o);
  const int64_t steps[] = {0, 37, 100, 150, 199};
  const double torch_lr[] = {0.10000000000000001, 0.091872464387729391, 0.050499999999999996, 0.015498214331265893,
                             0.001006106692157801};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(s.lr_at(steps[i]), torch_lr[i], 1e-12) << "step " << steps[i];
}

TEST(TorchReference, WarmupChainedWithMultiStep) {
  // ChainedScheduler([LinearLR(start_factor=0.25, total_iters=30), MultiStepLR([20, 50], 0.5)]) per
  // iteration; here 10 steps per epoch, so milestones [2, 5] epochs are iterations 20 and 50.
  MultiStepLROptions o;
  o.milestones = {2, 5};
  o.gamma = 0.5;
  o.warmup_steps = 30;
  o.warmup_start_factor = 0.25;
  MultiStepLR s({0.1, 10, 20}, o);
  const int64_t steps[] = {0, 10, 25, 29, 30, 60};
  const double torch_lr[] = {0.025000000000000001, 0.049999999999999996, 0.043749999999999997,
                             0.048749999999999981, 0.049999999999999975, 0.024999999999999988};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(s.lr_at(steps[i]), torch_lr[i], 1e-12) << "step " << steps[i];
}
