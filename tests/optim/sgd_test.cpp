// SGD: each update against values worked out by hand from torch.optim.SGD's formulas (shown in the
// comments), weight decay skipped for no_decay parameters, state round trip, errors.
#include "optim/adamw.h"
#include "optim/sgd.h"

#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "optim_test_util.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::make_param;
using kiln::testing::set_grad;
using kiln::testing::values;

namespace {
SGDOptions opts(double lr, double momentum, double wd, bool nesterov = false, double dampening = 0) {
  SGDOptions o;
  o.lr = lr;
  o.momentum = momentum;
  o.weight_decay = wd;
  o.nesterov = nesterov;
  o.dampening = dampening;
  return o;
}
}  // namespace

TEST(SGD, PlainStepWithoutMomentum) {
  // p = p - lr * (g + wd * p) = [1 - 0.1 * (0.5 + 0.01), -2 - 0.1 * (0.25 - 0.02)] = [0.949, -2.023]
  auto p = make_param("w", {1.0f, -2.0f});
  SGD opt({p}, opts(0.1, 0.0, 0.01));
  set_grad(p, {0.5f, 0.25f});
  opt.step();
  expect_close(values(p), {0.949, -2.023}, 1e-6, "step 1");
  EXPECT_TRUE(opt.state_dict().tensors.empty());  // no momentum, no state
}

TEST(SGD, MomentumTwoSteps) {
  // lr 0.1, momentum 0.9, wd 0.01, g = [0.5, 0.25] twice, p0 = [1, -2]:
  // step 1: d = g + 0.01 p = [0.51, 0.23]; buf = d; p = p - 0.1 buf = [0.949, -2.023]
  // step 2: d = [0.50949, 0.22977]; buf = 0.9 [0.51, 0.23] + d = [0.96849, 0.43677];
  //         p = [0.949 - 0.096849, -2.023 - 0.043677] = [0.852151, -2.066677]
  auto p = make_param("w", {1.0f, -2.0f});
  SGD opt({p}, opts(0.1, 0.9, 0.01));
  set_grad(p, {0.5f, 0.25f});
  opt.step();
  expect_close(values(p), {0.949, -2.023}, 1e-6, "step 1");
  opt.step();  // same gradient still in .grad
  expect_close(values(p), {0.852151, -2.066677}, 1e-6, "step 2");
  expect_close(opt.state_dict().tensors.at("w.momentum_buffer").to_float_vector(), {0.96849, 0.43677}, 1e-6, "buf");
}

TEST(SGD, Nesterov) {
  // step 1: d = [0.51, 0.23]; buf = d; d + 0.9 buf = [0.969, 0.437]; p = [0.9031, -2.0437]
  // step 2: d = g + 0.01 p = [0.509031, 0.229563]; buf = 0.9 [0.51, 0.23] + d = [0.968031, 0.436563];
  //         d + 0.9 buf = [1.3802589, 0.6224697]; p = [0.76507411, -2.10594697]
  auto p = make_param("w", {1.0f, -2.0f});
  SGD opt({p}, opts(0.1, 0.9, 0.01, /*nesterov=*/true));
  set_grad(p, {0.5f, 0.25f});
  opt.step();
  expect_close(values(p), {0.9031, -2.0437}, 1e-6, "step 1");
  opt.step();
  expect_close(values(p), {0.76507411, -2.10594697}, 1e-6, "step 2");
}

TEST(SGD, Dampening) {
  // dampening 0.5, momentum 0.9, lr 0.1, g = [0.5, 0.25], no decay; the first step takes g undamped:
  // buf: [0.5, 0.25] -> 0.9 buf + 0.5 g = [0.7, 0.35] -> [0.88, 0.44]
  // p:   [0.95, -2.025] -> [0.88, -2.06] -> [0.792, -2.104]
  auto p = make_param("w", {1.0f, -2.0f});
  SGD opt({p}, opts(0.1, 0.9, 0.0, false, 0.5));
  set_grad(p, {0.5f, 0.25f});
  opt.step();
  opt.step();
  opt.step();
  expect_close(values(p), {0.792, -2.104}, 1e-6, "step 3");
}

TEST(SGD, WeightDecaySkipsNoDecayParamsWhenAsked) {
  for (bool skip : {false, true}) {
    auto w = make_param("w", {1.0f, -2.0f}, {1, 2});
    auto b = make_param("b", {1.0f, -2.0f}, {2}, /*no_decay=*/true);
    SGDOptions o = opts(0.1, 0.0, 0.5);
    o.no_decay_bn_bias = skip;
    SGD opt({w, b}, o);
    set_grad(w, {0.0f, 0.0f});
    set_grad(b, {0.0f, 0.0f});
    opt.step();
    // Decayed: p - 0.1 * 0.5 p = 0.95 p.
    expect_close(values(w), {0.95, -1.9}, 1e-7, "w");
    if (skip) expect_close(values(b), {1.0, -2.0}, 0, "b kept");
    else expect_close(values(b), {0.95, -1.9}, 1e-7, "b decayed");
  }
}

TEST(SGD, ParamsWithoutGradAreLeftAlone) {
  auto a = make_param("a", {1.0f});
  auto b = make_param("b", {2.0f});
  SGD opt({a, b}, opts(0.1, 0.9, 0.1));
  set_grad(a, {1.0f});
  opt.step();
  EXPECT_EQ(values(b), std::vector<float>{2.0f});
  auto st = opt.state_dict();
  EXPECT_EQ(st.tensors.size(), 1u);
  EXPECT_TRUE(st.tensors.count("a.momentum_buffer"));
}

TEST(SGD, TrainsThroughAutograd) {
  // Minimise sum((w - 3)^2): w converges to 3 with plain momentum SGD.
  auto w = make_param("w", {0.0f, 10.0f});
  SGD opt({w}, opts(0.05, 0.5, 0.0));
  Tensor three = Tensor::full({2}, 3.0);
  for (int it = 0; it < 200; ++it) {
    opt.zero_grad();
    Tensor loss = ops::sum(ops::square(ops::sub(w.param, three)));
    loss.backward();
    opt.step();
  }
  expect_close(values(w), {3.0, 3.0}, 1e-4, "converged");
}

TEST(SGD, StateRoundTripContinuesIdentically) {
  auto make = [] {
    return std::vector<ParamRef>{make_param("conv.weight", {0.3f, -0.7f, 1.1f, 0.2f}, {2, 2}),
                                 make_param("conv.bias", {0.05f, -0.05f}, {2}, true)};
  };
  auto grads = [](int t) {
    return std::pair<std::vector<float>, std::vector<float>>{{0.1f * t, -0.2f, 0.3f, 0.05f * t}, {0.01f, -0.02f * t}};
  };
  SGDOptions o = opts(0.1, 0.9, 1e-3, true);
  o.no_decay_bn_bias = true;
  auto a = make();
  SGD opt_a(a, o);
  for (int t = 1; t <= 3; ++t) {
    set_grad(a[0], grads(t).first);
    set_grad(a[1], grads(t).second);
    opt_a.step();
  }
  OptimizerState saved = opt_a.state_dict();
  auto b = kiln::testing::copy_params(a);
  SGD opt_b(b, o);
  opt_b.load_state_dict(saved);
  for (int t = 4; t <= 6; ++t) {
    for (auto* ps : {&a, &b}) {
      set_grad((*ps)[0], grads(t).first);
      set_grad((*ps)[1], grads(t).second);
    }
    opt_a.step();
    opt_b.step();
  }
  EXPECT_EQ(values(a[0]), values(b[0]));
  EXPECT_EQ(values(a[1]), values(b[1]));
  // The saved state is a copy: training on did not change it.
  EXPECT_NE(saved.tensors.at("conv.weight.momentum_buffer").to_float_vector(),
            opt_a.state_dict().tensors.at("conv.weight.momentum_buffer").to_float_vector());
}

TEST(SGD, LoadStateDictErrors) {
  auto p = make_param("fc.weight", {1.0f, 2.0f});
  SGD opt({p}, opts(0.1, 0.9, 0.0));
  auto expect_error = [&](const OptimizerState& s, const std::string& what) {
    try {
      opt.load_state_dict(s);
      ADD_FAILURE() << "no error, expected " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error({"adamw", {}, {}}, "state is for optimizer 'adamw', this optimizer is 'sgd'");
  expect_error({"sgd", {{"fc.wieght.momentum_buffer", Tensor::zeros({2})}}, {}}, "closest 'fc.weight'");
  expect_error({"sgd", {{"fc.weight.exp_avg", Tensor::zeros({2})}}, {}}, "no slot this optimizer keeps");
  expect_error({"sgd", {{"fc.weight.momentum_buffer", Tensor::zeros({3})}}, {}}, "f32[3] on cpu but parameter 'fc.weight' is f32[2]");
  expect_error({"sgd", {{"fc.weight.momentum_buffer", Tensor::zeros({2}, DType::f64)}}, {}}, "expected f32");
  expect_error({"sgd", {}, {{"fc.weight.step", 3}}}, "no slot");
  // A failed load changes nothing.
  set_grad(p, {1.0f, 1.0f});
  opt.step();
  auto before = opt.state_dict().tensors.at("fc.weight.momentum_buffer").to_float_vector();
  expect_error({"sgd", {{"fc.weight.momentum_buffer", Tensor::zeros({2})}, {"x.momentum_buffer", Tensor::zeros({2})}}, {}},
               "'x.momentum_buffer' names no parameter");
  EXPECT_EQ(opt.state_dict().tensors.at("fc.weight.momentum_buffer").to_float_vector(), before);
}

TEST(SGD, BadParamsAndOptions) {
  auto p = make_param("w", {1.0f});
  EXPECT_THROW(SGD({p, p}), Error);  // duplicate name
  ParamRef h{"h", Tensor::ones({2}, DType::f16), false};
  try {
    SGD({h});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'h' is f16[2] on cpu"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SGD({p}, opts(0.1, 0.0, 0.0, /*nesterov=*/true)), Error);
  EXPECT_THROW(SGD({p}, opts(-1, 0.9, 0.0)), Error);
  SGD opt({p});
  EXPECT_THROW(opt.set_lr(-0.1), Error);
  // A gradient of the wrong shape.
  Tensor t = p.param;
  EXPECT_THROW(t.set_grad(Tensor::zeros({3})), Error);
}

// step_unless (the fp16 loss scaler's device mode): a nonzero flag leaves the weights and the
// momentum buffers as they are, exactly as a step never taken, including a first step (with
// dampening the first step sets buf = g and the later ones buf = m*buf + (1-d)*g, so a buffer must
// not be created by a skipped step). AdamW counts its steps on the host and does not offer it.
TEST(SGD, StepUnlessAFlagIsAStepNotTaken) {
  for (bool nesterov : {false, true}) {
    SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.dampening = nesterov ? 0.0 : 0.25;
    o.nesterov = nesterov;
    o.weight_decay = 0.01;
    auto a = make_param("a", {1.0f, -2.0f, 0.5f});
    auto b = make_param("b", {3.0f, 0.25f});
    std::vector<ParamRef> ref_params = {a, b};
    std::vector<ParamRef> flagged = kiln::testing::copy_params(ref_params);
    SGD ref(ref_params, o), dev(flagged, o);
    const std::vector<int> flags = {1, 0, 0, 1, 1, 0, 0};
    for (size_t t = 0; t < flags.size(); ++t) {
      const std::vector<float> ga = {0.5f * t - 1.0f, 0.25f, -0.125f}, gb = {2.0f, -1.0f * t};
      set_grad(ref_params[0], ga);
      set_grad(ref_params[1], gb);
      set_grad(flagged[0], ga);
      set_grad(flagged[1], gb);
      if (!flags[t]) ref.step();
      dev.step_unless(Tensor::full({}, flags[t], DType::i32));
      for (size_t k = 0; k < 2; ++k)
        EXPECT_EQ(values(flagged[k]), values(ref_params[k])) << "nesterov " << nesterov << ", step " << t << ", " << k;
    }
    const OptimizerState sr = ref.state_dict(), sd = dev.state_dict();
    ASSERT_EQ(sr.tensors.size(), 2u);
    ASSERT_EQ(sd.tensors.size(), 2u);
    for (const auto& [key, t] : sr.tensors) EXPECT_EQ(sd.tensors.at(key).to_float_vector(), t.to_float_vector()) << key;
  }
  AdamW adamw({make_param("w", {1.0f})});
  EXPECT_FALSE(adamw.can_skip_on_device());
  try {
    adamw.step_unless(Tensor::zeros({}, DType::i32));
    ADD_FAILURE() << "AdamW skipped on the device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adamw: the step cannot be skipped on the device"), std::string::npos)
        << e.what();
  }
}
