// AdamW: updates against values worked out by hand from torch.optim.AdamW's formulas, bias
// correction, decoupled weight decay, amsgrad, state round trip and errors.
#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

#include "optim_test_util.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::make_param;
using kiln::testing::set_grad;
using kiln::testing::values;

namespace {
AdamWOptions opts(double lr, double wd, bool amsgrad = false) {
  AdamWOptions o;
  o.lr = lr;
  o.weight_decay = wd;
  o.amsgrad = amsgrad;
  return o;
}
}  // namespace

TEST(AdamW, TwoStepsByHand) {
  // lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.1; p0 = [1, -2]
  // step 1, g = [0.5, -0.25]: p *= 1 - 0.01 -> [0.99, -1.98]; m = [0.05, -0.025]; v = [2.5e-4, 6.25e-5];
  //   bias corrections 0.1 and 0.001: m^ = g, sqrt(v^) = |g|, so the step is lr * sign(g) (less eps):
  //   p = [0.99 - 0.1, -1.98 + 0.1] = [0.890000002, -1.880000004]
  // step 2, g = [0.1, 0.2]: m = [0.055, -0.0025], v = [2.5975e-4, 1.024375e-4]; bc1 = 0.19, bc2 = 0.001999
  //   p = 0.99 p - 0.1 / 0.19 * m / (sqrt(v) / sqrt(0.001999) + 1e-8) = [0.800795906, -1.855387499]
  auto p = make_param("w", {1.0f, -2.0f});
  AdamW opt({p}, opts(0.1, 0.1));
  set_grad(p, {0.5f, -0.25f});
  opt.step();
  expect_close(values(p), {0.890000002, -1.880000004}, 1e-6, "step 1");
  set_grad(p, {0.1f, 0.2f});
  opt.step();
  expect_close(values(p), {0.8007959063646517, -1.8553874994866317}, 1e-6, "step 2");
  auto st = opt.state_dict();
  expect_close(st.tensors.at("w.exp_avg").to_float_vector(), {0.055, -0.0025}, 1e-6, "exp_avg");
  expect_close(st.tensors.at("w.exp_avg_sq").to_float_vector(), {2.5975e-4, 1.024375e-4}, 1e-6, "exp_avg_sq");
  EXPECT_EQ(st.scalars.at("w.step"), 2.0);
}

TEST(AdamW, BiasCorrectionMakesEarlyStepsLrSized) {
  // With a constant gradient, m^ = g and v^ = g^2 at every step t (the corrections divide out
  // 1 - beta^t exactly), so each step moves by lr. Without correction step 1 would move by
  // lr * 0.1 / sqrt(0.001) = 3.16 lr.
  auto p = make_param("w", {0.0f, 0.0f, 0.0f});
  AdamW opt({p}, opts(0.01, 0.0));
  for (int t = 1; t <= 5; ++t) {
    set_grad(p, {2.0f, -0.001f, 300.0f});
    opt.step();
    expect_close(values(p), {-0.01 * t, 0.01 * t, -0.01 * t}, 1e-5, "step " + std::to_string(t));
  }
}

TEST(AdamW, DecoupledDecayAndNoDecayParams) {
  // Zero gradient: the moments stay 0 and only the decoupled decay acts: p *= 1 - lr * wd.
  for (bool skip : {false, true}) {
    auto w = make_param("w", {1.0f, -2.0f}, {2, 1});
    auto b = make_param("b", {4.0f}, {1}, /*no_decay=*/true);
    AdamWOptions o = opts(0.1, 0.5);
    o.no_decay_bn_bias = skip;
    AdamW opt({w, b}, o);
    set_grad(w, {0.0f, 0.0f});
    set_grad(b, {0.0f});
    opt.step();
    expect_close(values(w), {0.95, -1.9}, 1e-7, "w");
    expect_close(values(b), {skip ? 4.0 : 3.8}, 1e-7, "b");
  }
}

TEST(AdamW, AmsgradUsesTheLargestSecondMoment) {
  // lr 0.1, betas (0.9, 0.999), no decay. g1 = 1, then g2 = 0:
  // v1 = 0.001, v2 = 0.000999 < vmax = 0.001; m2 = 0.09; bc1 = 0.19, bc2 = 0.001999
  // plain:   p2 = p1 - 0.1/0.19 * 0.09 / (sqrt(0.000999 / 0.001999) + 1e-8)
  // amsgrad: p2 = p1 - 0.1/0.19 * 0.09 / (sqrt(0.001    / 0.001999) + 1e-8)
  double m2 = 0.09, bc1 = 0.19, bc2 = 1 - 0.999 * 0.999;
  double step_plain = 0.1 / bc1 * m2 / (std::sqrt(0.000999 / bc2) + 1e-8);
  double step_ams = 0.1 / bc1 * m2 / (std::sqrt(0.001 / bc2) + 1e-8);
  for (bool ams : {false, true}) {
    auto p = make_param("w", {0.0f});
    AdamW opt({p}, opts(0.1, 0.0, ams));
    set_grad(p, {1.0f});
    opt.step();
    set_grad(p, {0.0f});
    opt.step();
    expect_close(values(p), {-0.1 * (1 - 1e-8 / (1 + 1e-8)) - (ams ? step_ams : step_plain)}, 1e-6,
                 ams ? "amsgrad" : "plain");
    EXPECT_EQ(opt.state_dict().tensors.count("w.max_exp_avg_sq"), ams ? 1u : 0u);
  }
}

TEST(AdamW, StateRoundTripContinuesIdentically) {
  for (bool ams : {false, true}) {
    std::vector<ParamRef> a = {make_param("layer.weight", {0.3f, -0.7f, 1.1f}, {3}),
                               make_param("layer.bias", {0.5f}, {1}, true),
                               make_param("unused", {9.0f}, {1})};
    AdamWOptions o = opts(0.01, 0.05, ams);
    o.no_decay_bn_bias = true;
    AdamW opt_a(a, o);
    for (int t = 1; t <= 3; ++t) {
      set_grad(a[0], {0.1f * t, -0.3f, 0.2f / t});
      set_grad(a[1], {-0.05f * t});
      opt_a.step();
    }
    OptimizerState saved = opt_a.state_dict();
    EXPECT_FALSE(saved.scalars.count("unused.step"));  // never had a gradient
    auto b = kiln::testing::copy_params(a);
    AdamW opt_b(b, o);
    opt_b.load_state_dict(saved);
    for (int t = 4; t <= 7; ++t) {
      for (auto* ps : {&a, &b}) {
        set_grad((*ps)[0], {0.1f * t, -0.3f, 0.2f / t});
        set_grad((*ps)[1], {-0.05f * t});
      }
      opt_a.step();
      opt_b.step();
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(values(a[i]), values(b[i])) << a[i].name;
    EXPECT_EQ(opt_b.state_dict().scalars.at("layer.weight.step"), 7.0);
  }
}

TEST(AdamW, LoadStateDictErrors) {
  auto p = make_param("w", {1.0f, 2.0f});
  AdamW opt({p}, opts(0.1, 0.0));
  auto expect_error = [&](const OptimizerState& s, const std::string& what) {
    try {
      opt.load_state_dict(s);
      ADD_FAILURE() << "no error, expected " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Tensor z = Tensor::zeros({2});
  expect_error({"sgd", {}, {}}, "state is for optimizer 'sgd'");
  expect_error({"adamw", {{"w.exp_avg", z}}, {{"w.step", 1}}}, "no 'w.exp_avg_sq'");
  expect_error({"adamw", {{"w.exp_avg", z}, {"w.exp_avg_sq", z}}, {}}, "no 'w.step'");
  expect_error({"adamw", {{"w.exp_avg", z}, {"w.exp_avg_sq", z}}, {{"w.step", 0.5}}}, "not a positive integer");
  expect_error({"adamw", {{"w.momentum_buffer", z}}, {}}, "no slot");
  expect_error({"adamw", {}, {{"v.step", 1}}}, "'v.step' names no parameter");
  AdamW ams({p}, opts(0.1, 0.0, true));
  EXPECT_THROW(ams.load_state_dict({"adamw", {{"w.exp_avg", z}, {"w.exp_avg_sq", z}}, {{"w.step", 2}}}), Error);
}

TEST(AdamW, BadOptions) {
  auto p = make_param("w", {1.0f});
  AdamWOptions o;
  o.betas = {0.9, 1.0};
  EXPECT_THROW(AdamW({p}, o), Error);
  o.betas = {-0.1, 0.9};
  EXPECT_THROW(AdamW({p}, o), Error);
  o = {};
  o.eps = -1;
  EXPECT_THROW(AdamW({p}, o), Error);
}
