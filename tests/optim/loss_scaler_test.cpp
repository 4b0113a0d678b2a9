// Dynamic loss scaling: growth after N clean steps, backoff and skip on an injected inf, a run with
// a skipped step equal to a control run that never took it, the floor, the abort, state round trip;
// device mode (the verdict and the rule kept in tensors, as a GPU step keeps them) against host mode.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

using namespace kiln;
using kiln::testing::make_param;
using kiln::testing::set_grad;
using kiln::testing::values;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

LossScalerOptions small(double init, int64_t interval, double floor = 1.0, int64_t max_bad = 50) {
  LossScalerOptions o;
  o.init_scale = init;
  o.growth_interval = interval;
  o.min_scale = floor;
  o.max_nonfinite_steps = max_bad;
  return o;
}
}  // namespace

TEST(LossScaler, DefaultsStartAt2To16) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.skipped_steps(), 0);
}

TEST(LossScaler, GrowsAfterGrowthIntervalCleanSteps) {
  LossScaler s(small(1024, 3));
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.growth_tracker(), 2);
  s.update(false);
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  // A non-finite step resets the count: three more clean steps are needed.
  s.update(false);
  s.update(true);
  EXPECT_EQ(s.scale(), 1024.0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 2048.0);
}

TEST(LossScaler, UnscalesAndDetectsInfAndNan) {
  auto a = make_param("a", {1.0f, 2.0f});
  auto b = make_param("b", {3.0f});
  auto none = make_param("c", {4.0f});  // no gradient: skipped
  LossScaler s(small(8, 100));
  set_grad(a, {8.0f, -16.0f});
  set_grad(b, {4.0f});
  EXPECT_TRUE(s.unscale_and_check({a, b, none}));
  EXPECT_EQ(a.param.grad().to_float_vector(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(b.param.grad().to_float_vector(), (std::vector<float>{0.5f}));
  EXPECT_THROW(s.unscale_and_check({a, b}), Error);  // twice in one iteration
  s.update(false);
  set_grad(b, {std::nanf("")});
  EXPECT_FALSE(s.unscale_and_check({a, b}));
  s.update(true);
  set_grad(a, {kInf, 0.0f});
  EXPECT_FALSE(s.unscale_and_check({a}));
  s.update(false);  // the failed check counts even when the caller says "finite"
  EXPECT_EQ(s.skipped_steps(), 2);
  EXPECT_EQ(s.scale(), 2.0);
}

TEST(LossScaler, BackoffAndSkipOnInjectedInf) {
  auto p = make_param("w", {1.0f, -1.0f});
  SGDOptions o;
  o.lr = 0.5;
  SGD opt({p}, o);
  LossScaler s(small(1024, 100));
  set_grad(p, {kInf, 1024.0f});
  EXPECT_FALSE(s.step(opt));
  EXPECT_EQ(values(p), (std::vector<float>{1.0f, -1.0f}));  // not updated
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_EQ(s.consecutive_nonfinite(), 1);
  EXPECT_TRUE(opt.state_dict().tensors.empty());  // momentum untouched
  set_grad(p, {512.0f, 1024.0f});
  EXPECT_TRUE(s.step(opt));
  EXPECT_EQ(values(p), (std::vector<float>{0.5f, -2.0f}));  // grads unscaled to [1, 2]
  EXPECT_EQ(s.consecutive_nonfinite(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, StepAfterManualUnscaleDoesNotUnscaleTwice) {
  auto p = make_param("w", {0.0f});
  SGDOptions o;
  o.lr = 1.0;
  o.momentum = 0;
  SGD opt({p}, o);
  LossScaler s(small(4, 100));
  set_grad(p, {8.0f});
  ASSERT_TRUE(s.unscale_and_check(opt.params()));
  clip_grad_norm(opt.params(), 100.0);
  EXPECT_TRUE(s.step(opt));
  EXPECT_EQ(values(p), std::vector<float>{-2.0f});
}

TEST(LossScaler, SkippedStepEqualsControlRun) {
  // Scaled run: loss = sum(w * x_t), backward through scale_loss; x_2 holds an inf, so step 2 is
  // skipped and the scale backs off. Control: the same losses unscaled, step 2 never taken.
  auto x_at = [](int t) {
    std::vector<float> x = {0.5f * t - 1.0f, 0.25f, -0.125f * t, 2.0f};
    if (t == 2) x[1] = kInf;
    return Tensor::from_vector(x, {4});
  };
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 0.01;
  auto w_scaled = make_param("w", {1.0f, -2.0f, 0.5f, 3.0f});
  auto w_control = make_param("w", {1.0f, -2.0f, 0.5f, 3.0f});
  SGD opt_scaled({w_scaled}, o), opt_control({w_control}, o);
  LossScaler scaler(small(65536, 3));
  std::vector<double> scales;
  for (int t = 0; t < 8; ++t) {
    opt_scaled.zero_grad();
    scaler.scale_loss(ops::sum(ops::mul(w_scaled.param, x_at(t)))).backward();
    bool stepped = scaler.step(opt_scaled);
    EXPECT_EQ(stepped, t != 2) << t;
    scales.push_back(scaler.scale());
    if (t == 2) continue;
    opt_control.zero_grad();
    ops::sum(ops::mul(w_control.param, x_at(t))).backward();
    opt_control.step();
  }
  EXPECT_EQ(values(w_scaled), values(w_control));  // bit for bit: power-of-two scales are exact
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // 65536 for t = 0, 1; backoff at t = 2; then grows after 3 clean steps (t = 5).
  EXPECT_EQ(scales, (std::vector<double>{65536, 65536, 32768, 32768, 32768, 65536, 65536, 65536}));
}

TEST(LossScaler, FloorStopsTheBackoff) {
  LossScaler s(small(16, 100, /*floor=*/4));
  s.update(true);
  EXPECT_EQ(s.scale(), 8.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 4.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 4.0);
  EXPECT_EQ(s.skipped_steps(), 3);
}

TEST(LossScaler, AbortsWhenNonFiniteTooLong) {
  LossScaler s(small(16, 100, 1, /*max_bad=*/3));
  s.update(true);
  s.update(true);
  s.update(false);  // a clean step resets the run of bad ones
  s.update(true);
  s.update(true);
  try {
    s.update(true);
    ADD_FAILURE() << "no abort";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("non-finite (inf/NaN) for 3 iterations in a row"), std::string::npos) << msg;
    EXPECT_NE(msg.find("precision=bf16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("lower learning rate"), std::string::npos) << msg;
  }
}

TEST(LossScaler, StateRoundTrip) {
  LossScaler a(small(1024, 4, 2, 10));
  for (bool bad : {false, true, false, false, true, true, false}) a.update(bad);
  auto st = a.state_dict();
  EXPECT_EQ(st.at("scale"), 128.0);
  EXPECT_EQ(st.at("skipped_steps"), 3.0);
  EXPECT_EQ(st.at("growth_tracker"), 1.0);
  EXPECT_EQ(st.at("consecutive_nonfinite"), 0.0);
  LossScaler b(small(1024, 4, 2, 10));
  b.load_state_dict(st);
  for (bool bad : {false, false, false, true, false, false, false, false}) {
    a.update(bad);
    b.update(bad);
    EXPECT_EQ(a.state_dict(), b.state_dict());
  }
  auto bad_state = st;
  bad_state["scael"] = 1;
  EXPECT_THROW(b.load_state_dict(bad_state), Error);
  bad_state = st;
  bad_state.erase("growth_tracker");
  EXPECT_THROW(b.load_state_dict(bad_state), Error);
  bad_state = st;
  bad_state["scale"] = 0;
  EXPECT_THROW(b.load_state_dict(bad_state), Error);
  bad_state = st;
  bad_state["skipped_steps"] = 1.5;
  EXPECT_THROW(b.load_state_dict(bad_state), Error);
  EXPECT_EQ(b.state_dict(), a.state_dict());  // failed loads changed nothing
}

namespace {
// The losses of SkippedStepEqualsControlRun, with infs at the steps in `bad`.
Tensor x_with_infs(int t, const std::vector<int>& bad) {
  std::vector<float> x = {0.5f * t - 1.0f, 0.25f, -0.125f * t, 2.0f};
  for (int b : bad)
    if (t == b) x[1] = kInf;
  return Tensor::from_vector(x, {4});
}
}  // namespace

// Device mode (the GPU step's path, run here on CPU tensors): the same losses through scale_loss,
// unscale_on_device, SGD's step_unless(found_inf()) and update_on_device take exactly the host
// mode's steps: equal weights and momentum buffers bit for bit, and the same scale and counters
// after every iteration. The first iteration is skipped (SGD reads the flag there: its momentum
// buffers must not be created by a step not taken, and with dampening the first step differs from
// the later ones), and two later ones in a row.
TEST(LossScaler, DeviceModeTakesTheHostModesSteps) {
  const std::vector<int> bad = {0, 4, 5};
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.dampening = 0.25;
  o.weight_decay = 0.01;
  auto w_host = make_param("w", {1.0f, -2.0f, 0.5f, 3.0f});
  auto w_dev = make_param("w", {1.0f, -2.0f, 0.5f, 3.0f});
  SGD opt_host({w_host}, o), opt_dev({w_dev}, o);
  LossScaler host(small(65536, 3)), dev(small(65536, 3));
  for (int t = 0; t < 10; ++t) {
    opt_host.zero_grad();
    host.scale_loss(ops::sum(ops::mul(w_host.param, x_with_infs(t, bad)))).backward();
    const bool stepped = host.step(opt_host);
    opt_dev.zero_grad();
    dev.scale_loss(ops::sum(ops::mul(w_dev.param, x_with_infs(t, bad)))).backward();
    dev.unscale_on_device(opt_dev.params());
    EXPECT_EQ(dev.found_inf().item(), stepped ? 0.0 : 1.0) << t;
    opt_dev.step_unless(dev.found_inf());
    dev.update_on_device();
    EXPECT_TRUE(dev.on_device());
    EXPECT_EQ(dev.found_inf().item(), 0.0) << "update_on_device clears the flag, step " << t;
    EXPECT_EQ(values(w_dev), values(w_host)) << t;
    EXPECT_EQ(dev.scale(), host.scale()) << t;
    EXPECT_EQ(dev.skipped_steps(), host.skipped_steps()) << t;
    EXPECT_EQ(dev.growth_tracker(), host.growth_tracker()) << t;
    EXPECT_EQ(dev.consecutive_nonfinite(), host.consecutive_nonfinite()) << t;
  }
  EXPECT_EQ(host.skipped_steps(), 3);
  const OptimizerState a = opt_host.state_dict(), b = opt_dev.state_dict();
  ASSERT_EQ(a.tensors.size(), 1u);
  ASSERT_EQ(b.tensors.size(), 1u);
  EXPECT_EQ(a.tensors.begin()->second.to_float_vector(), b.tensors.begin()->second.to_float_vector());
  EXPECT_EQ(dev.state_dict(), host.state_dict());
}

// In device mode nothing throws during the steps; poll() (the trainer's, at each log interval)
// reads the state and stops with update()'s error once max_nonfinite_steps bad iterations in a row
// have been counted.
TEST(LossScaler, DeviceModeStopsAtThePollAfterTooManyNonFiniteIterations) {
  auto p = make_param("w", {1.0f});
  LossScaler s(small(16, 100, 1, /*max_bad=*/3));
  auto bad_iteration = [&] {
    set_grad(p, {kInf});
    s.unscale_on_device({p});
    s.update_on_device();
  };
  bad_iteration();
  bad_iteration();
  EXPECT_NO_THROW(s.poll());
  EXPECT_EQ(s.consecutive_nonfinite(), 2);
  bad_iteration();
  bad_iteration();  // past the limit: still no error until the poll
  try {
    s.poll();
    ADD_FAILURE() << "no abort";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("non-finite (inf/NaN) for 4 iterations in a row"), std::string::npos) << msg;
    EXPECT_NE(msg.find("precision=bf16"), std::string::npos) << msg;
  }
}

// The host-mode calls and load_state_dict take the state back from the device and go on from it;
// the next device-mode iteration moves it there again.
TEST(LossScaler, SwitchingModesKeepsTheState) {
  auto p = make_param("w", {1.0f, 2.0f});
  LossScaler dev(small(1024, 2, 1, 10)), host(small(1024, 2, 1, 10));
  auto iteration = [&](bool bad, bool on_device) {
    set_grad(p, {bad ? kInf : 8.0f, 4.0f});
    if (on_device) {
      dev.unscale_on_device({p});
      dev.update_on_device();
    } else {
      dev.update(!dev.unscale_and_check({p}));
    }
    host.update(bad);
    EXPECT_EQ(dev.state_dict(), host.state_dict());
  };
  iteration(false, true);
  iteration(true, true);
  iteration(false, false);
  EXPECT_FALSE(dev.on_device());
  iteration(false, true);
  iteration(false, true);
  EXPECT_EQ(dev.scale(), 1024.0);  // backed off to 512, then grown after two clean iterations
  LossScaler loaded(small(1024, 2, 1, 10));
  loaded.load_state_dict(dev.state_dict());
  EXPECT_FALSE(loaded.on_device());
  dev.load_state_dict(host.state_dict());
  EXPECT_FALSE(dev.on_device());
  EXPECT_EQ(dev.state_dict(), host.state_dict());
  // In device mode the loss is multiplied by the scale held there.
  iteration(false, true);
  Tensor w = make_param("v", {3.0f}).param;
  Tensor scaled = dev.scale_loss(ops::sum(w));
  scaled.backward();
  EXPECT_EQ(scaled.item(), 3.0 * dev.scale());
  EXPECT_EQ(w.grad().item(), dev.scale());
}
