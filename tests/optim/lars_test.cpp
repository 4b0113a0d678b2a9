// LARS: several steps against the update rule written out here in double (MLPerf's reference:
// trust = eta ||w|| / (||g|| + wd ||w|| + eps), decay before the momentum, lr inside the buffer), the
// exclusion of biases and batch-norm parameters (plain momentum SGD, no decay), the zero-norm cases,
// Nesterov, a skipped step, the state round trip (resume bit for bit) and config errors.
#include "optim/lars.h"
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "optim_test_util.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::make_param;
using kiln::testing::set_grad;
using kiln::testing::values;

namespace {

// The reference, one tensor, in double.
struct RefTensor {
  std::vector<double> w, buf;
  bool adapt = true;
};

void ref_step(RefTensor& r, const std::vector<float>& g, double lr, double momentum, double wd, double eta, double eps,
              bool nesterov) {
  const double decay = r.adapt ? wd : 0.0;
  double ww = 0, gg = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    ww += r.w[i] * r.w[i];
    gg += double(g[i]) * g[i];
  }
  const double wn = std::sqrt(ww), gn = std::sqrt(gg);
  const double trust = r.adapt && wn > 0 && gn > 0 ? eta * wn / (gn + decay * wn + eps) : 1.0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = g[i] + decay * r.w[i];
    r.buf[i] = momentum * r.buf[i] + lr * trust * d;
    r.w[i] -= nesterov ? momentum * r.buf[i] + lr * trust * d : r.buf[i];
  }
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// A small network's parameters: a conv weight and its bias, a batch norm, a linear layer.
std::vector<ParamRef> net() {
  return {make_param("conv.weight", {0.3f, -0.2f, 0.5f, 0.1f, -0.4f, 0.25f}, {2, 3, 1, 1}),
          make_param("conv.bias", {0.05f, -0.02f}),
          make_param("bn.weight", {1.0f, 0.9f, 1.1f}),
          make_param("bn.bias", {0.01f, 0.0f, -0.03f}),
          make_param("fc.weight", {0.2f, -0.1f, 0.05f, 0.3f, -0.25f, 0.15f}, {2, 3})};
}

std::vector<float> grad_of(size_t k, int step, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>(std::sin(1.0 + 3.0 * k + 0.7 * i + 1.3 * step)) * 0.5f;
  return g;
}

LARSOptions opts(double lr, double momentum, double wd, double eta = 0.001, bool nesterov = false) {
  LARSOptions o;
  o.lr = lr;
  o.momentum = momentum;
  o.weight_decay = wd;
  o.eta = eta;
  o.nesterov = nesterov;
  return o;
}

// Runs `steps` steps of LARS and of the reference on net(), the lr changing every step (as a
// schedule does), and compares every parameter and buffer.
void check_against_reference(const LARSOptions& o, const std::vector<bool>& adapt, int steps, const std::string& what) {
  auto params = net();
  LARS opt(params, o);
  std::vector<RefTensor> ref;
  for (size_t k = 0; k < params.size(); ++k) {
    RefTensor r;
    r.w = to_double(values(params[k]));
    r.buf.assign(r.w.size(), 0.0);
    r.adapt = adapt[k];
    ref.push_back(r);
    EXPECT_EQ(opt.excluded()[k], !adapt[k]) << what << ": " << params[k].name;
  }
  for (int step = 0; step < steps; ++step) {
    const double lr = o.lr * (1.0 - 0.2 * step);
    opt.set_lr(lr);
    for (size_t k = 0; k < params.size(); ++k) {
      auto g = grad_of(k, step, ref[k].w.size());
      set_grad(params[k], g);
      ref_step(ref[k], g, lr, o.momentum, o.weight_decay, o.eta, o.epsilon, o.nesterov);
    }
    opt.step();
  }
  OptimizerState st = opt.state_dict();
  for (size_t k = 0; k < params.size(); ++k) {
    expect_close(values(params[k]), ref[k].w, 2e-6, what + " " + params[k].name);
    expect_close(st.tensors.at(params[k].name + ".momentum_buffer").to_float_vector(), ref[k].buf, 2e-6,
                 what + " buffer " + params[k].name);
  }
}

}  // namespace

TEST(LARS, SeveralStepsMatchTheFormula) {
  // Default exclusion: conv.bias, bn.weight, bn.bias take plain momentum SGD without decay.
  const std::vector<bool> adapt = {true, false, false, false, true};
  // eta large enough that the trust ratio is far from 1 both ways (about 0.3 .. 3 here).
  check_against_reference(opts(0.5, 0.9, 5e-2, 1.0), adapt, 4, "momentum");
  check_against_reference(opts(0.5, 0.9, 5e-2, 1.0, /*nesterov=*/true), adapt, 4, "nesterov");
  check_against_reference(opts(2.0, 0.0, 0.0, 0.02), adapt, 3, "no momentum, no decay");
  LARSOptions eps = opts(0.5, 0.9, 1e-3, 0.5);
  eps.epsilon = 0.3;
  check_against_reference(eps, adapt, 3, "epsilon");
}

TEST(LARS, TheTrustRatioScalesTheStep) {
  // One tensor, one step, numbers by hand: w = [3, 4] (||w|| = 5), g = [0, 2] (||g|| = 2), wd 0.1,
  // eta 0.01, lr 1: trust = 0.01 * 5 / (2 + 0.1 * 5) = 0.02; d = g + 0.1 w = [0.3, 2.4];
  // buf = 0.02 * d = [0.006, 0.048]; w = [2.994, 3.952].
  auto p = make_param("fc.weight", {3.0f, 4.0f}, {1, 2});
  LARS opt({p}, opts(1.0, 0.9, 0.1, 0.01));
  set_grad(p, {0.0f, 2.0f});
  opt.step();
  expect_close(values(p), {2.994, 3.952}, 1e-6, "w");
}

TEST(LARS, ExclusionRuleByKind) {
  auto params = net();
  auto names = [&](const std::vector<std::string>& exclude) {
    std::vector<std::string> out;
    std::vector<bool> ex = lars_excluded(params, exclude);
    for (size_t k = 0; k < params.size(); ++k)
      if (ex[k]) out.push_back(params[k].name);
    return out;
  };
  EXPECT_EQ(names({"bias", "bn"}), (std::vector<std::string>{"conv.bias", "bn.weight", "bn.bias"}));
  EXPECT_EQ(names({"bias"}), (std::vector<std::string>{"conv.bias", "bn.bias"}));
  EXPECT_EQ(names({"bn"}), (std::vector<std::string>{"bn.weight", "bn.bias"}));
  EXPECT_TRUE(names({}).empty());
  // exclude [] applies LARS (and the decay) to every tensor.
  LARSOptions o = opts(0.5, 0.9, 5e-2, 1.0);
  o.exclude = {};
  check_against_reference(o, {true, true, true, true, true}, 3, "exclude none");
  o.exclude = {"bn"};
  check_against_reference(o, {true, true, false, false, true}, 3, "exclude bn");
}

TEST(LARS, AnExcludedParameterTakesPlainMomentumSgdWithoutDecay) {
  // bn.weight, lr 0.1, momentum 0.9, wd 0.5 (ignored), g = [1, -2] twice, w0 = [1, 1]:
  // step 1: buf = 0.1 g = [0.1, -0.2]; w = [0.9, 1.2]
  // step 2: buf = 0.9 [0.1, -0.2] + [0.1, -0.2] = [0.19, -0.38]; w = [0.71, 1.58]
  auto p = make_param("bn.weight", {1.0f, 1.0f});
  LARS opt({p}, opts(0.1, 0.9, 0.5, 0.001));
  set_grad(p, {1.0f, -2.0f});
  opt.step();
  expect_close(values(p), {0.9, 1.2}, 1e-6, "step 1");
  opt.step();
  expect_close(values(p), {0.71, 1.58}, 1e-6, "step 2");
}

TEST(LARS, ZeroNormsGiveTrustOne) {
  // A zero weight (||w|| = 0): trust 1, d = g: w = -lr g.
  auto z = make_param("fc.weight", {0.0f, 0.0f}, {1, 2});
  LARS a({z}, opts(0.5, 0.9, 0.1, 0.001));
  set_grad(z, {0.4f, -0.2f});
  a.step();
  expect_close(values(z), {-0.2, 0.1}, 1e-7, "zero weight");
  // A zero gradient (||g|| = 0): trust 1, d = wd w: w = w - lr wd w = [2, -4] * (1 - 0.05).
  auto w = make_param("fc.weight", {2.0f, -4.0f}, {1, 2});
  LARS b({w}, opts(0.5, 0.9, 0.1, 0.001));
  set_grad(w, {0.0f, 0.0f});
  b.step();
  expect_close(values(w), {1.9, -3.8}, 1e-6, "zero gradient");
  for (float v : values(w)) EXPECT_TRUE(std::isfinite(v));
}

TEST(LARS, SkippedStepChangesNothing) {
  auto params = net();
  LARS opt(params, opts(0.5, 0.9, 1e-2, 1.0));
  EXPECT_TRUE(opt.can_skip_on_device());
  for (size_t k = 0; k < params.size(); ++k) set_grad(params[k], grad_of(k, 0, params[k].param.numel()));
  auto before = values(params[4]);
  opt.step_unless(Tensor::from_vector(std::vector<int64_t>{1}, {}, DType::i32));
  EXPECT_EQ(values(params[4]), before);
  for (auto& [key, t] : opt.state_dict().tensors)
    for (float v : t.to_float_vector()) EXPECT_EQ(v, 0.0f) << key;
  opt.step_unless(Tensor::from_vector(std::vector<int64_t>{0}, {}, DType::i32));
  EXPECT_NE(values(params[4]), before);
}

TEST(LARS, StateRoundTripResumesBitForBit) {
  auto a = net();
  LARS opt_a(a, opts(0.5, 0.9, 5e-2, 1.0, true));
  for (int step = 0; step < 3; ++step) {
    for (size_t k = 0; k < a.size(); ++k) set_grad(a[k], grad_of(k, step, a[k].param.numel()));
    opt_a.step();
  }
  OptimizerState st = opt_a.state_dict();
  EXPECT_EQ(st.type, "lars");
  EXPECT_EQ(st.tensors.size(), a.size());
  auto b = kiln::testing::copy_params(a);
  LARS opt_b(b, opts(0.5, 0.9, 5e-2, 1.0, true));
  opt_b.load_state_dict(st);
  for (int step = 3; step < 6; ++step) {
    for (size_t k = 0; k < a.size(); ++k) {
      set_grad(a[k], grad_of(k, step, a[k].param.numel()));
      set_grad(b[k], grad_of(k, step, b[k].param.numel()));
    }
    opt_a.step();
    opt_b.step();
  }
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(values(a[k]), values(b[k])) << a[k].name;
  // Another optimizer's state is refused, naming both.
  OptimizerState sgd_state = st;
  sgd_state.type = "sgd";
  EXPECT_THROW(opt_b.load_state_dict(sgd_state), Error);
}

TEST(LARS, FactoryDefaultsAndJsonRoundTrip) {
  auto params = net();
  auto opt = make_optimizer(json::parse(R"({"name": "lars"})"), params);
  EXPECT_EQ(opt->type(), "lars");
  EXPECT_EQ(opt->to_json(), json::parse(R"({"name": "lars", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.0,
      "eta": 0.001, "epsilon": 0.0, "nesterov": false, "exclude": ["bias", "bn"]})"));
  const char* text = R"({"name": "lars", "lr": 10.5, "momentum": 0.9, "weight_decay": 5e-5, "eta": 0.002,
      "epsilon": 1e-9, "nesterov": true, "exclude": ["bias"]})";
  auto o2 = make_optimizer(json::parse(text), params);
  EXPECT_EQ(o2->to_json(), json::parse(text));
  EXPECT_EQ(make_optimizer(o2->to_json(), params)->to_json(), o2->to_json());
  EXPECT_EQ(o2->state_slots(), 1);
}

TEST(LARS, BadOptionsNameTheKeyAndTheAcceptedRange) {
  auto expect_error = [](const std::string& text, const std::string& what) {
    try {
      auto params = net();
      make_optimizer(json::parse(text), params, "optim");
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"name": "lars", "momentum": 1})", "optim.momentum = 1 is not accepted; accepted: [0, 1)");
  expect_error(R"({"name": "lars", "momentum": 1.5})", "optim.momentum = 1.5 is out of range");
  expect_error(R"({"name": "lars", "eta": 0})", "optim.eta = 0 is not accepted; accepted: > 0");
  expect_error(R"({"name": "lars", "eta": -0.001})", "optim.eta = -0.001 is out of range");
  expect_error(R"({"name": "lars", "epsilon": -1})", "optim.epsilon = -1 is out of range");
  expect_error(R"({"name": "lars", "weight_decay": -1})", "optim.weight_decay = -1 is out of range");
  expect_error(R"({"name": "lars", "lr": -2})", "optim.lr = -2 is out of range");
  expect_error(R"({"name": "lars", "exclude": ["biases"]})",
               "optim.exclude[0] = \"biases\" is not accepted (did you mean \"bias\"?); accepted: bias, bn");
  expect_error(R"({"name": "lars", "exclude": "bias"})", "optim.exclude = \"bias\" is not accepted; accepted: a list");
  expect_error(R"({"name": "lars", "exclude": [1]})", "optim.exclude[0] = 1 is not accepted; accepted: one of bias, bn");
  expect_error(R"({"name": "lars", "no_decay_bn_bias": true})", "unknown key optim.no_decay_bn_bias");
  expect_error(R"({"name": "lars", "eeta": 0.001})", "unknown key optim.eeta (did you mean optim.eta?)");
}

// configs/imagenet_resnet50_lars.json: its optim and schedule sections build MLPerf's recipe (NVIDIA's
// DGX-A100 hyper-parameters, docs/training.md): LARS lr 10.5, wd 5e-5, eta 0.001, biases and
// batch norm excluded; poly power 2 to 1e-4 after a 2-epoch warm-up from 0; a global step of 3,200
// images (8 accumulated micro-batches of 400 on one GPU), label smoothing 0.1, 37 epochs.
TEST(LARS, ImageNetRecipeConfig) {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/configs/imagenet_resnet50_lars.json");
  ASSERT_TRUE(f.good());
  const json cfg = json::parse(f);
  auto params = net();
  auto opt = make_optimizer(cfg["optim"], params, "optim");
  auto* lars = dynamic_cast<LARS*>(opt.get());
  ASSERT_NE(lars, nullptr);
  EXPECT_DOUBLE_EQ(lars->lr(), 10.5);
  EXPECT_DOUBLE_EQ(lars->options().weight_decay, 5e-5);
  EXPECT_DOUBLE_EQ(lars->options().eta, 0.001);
  EXPECT_DOUBLE_EQ(lars->options().momentum, 0.9);
  EXPECT_EQ(lars->excluded(), (std::vector<bool>{false, true, true, true, false}));
  EXPECT_EQ(cfg["data"]["batch_size"], 3200);
  EXPECT_EQ(cfg["train"]["accumulate"], 8);
  EXPECT_EQ(cfg["train"]["label_smoothing"], 0.1);
  EXPECT_EQ(cfg["train"]["epochs"], 37);
  // 1,281,167 training images / 3,200 = 401 steps per epoch (the last one short).
  const ScheduleContext c{lars->lr(), 401, cfg["train"]["epochs"].get<int64_t>()};
  auto s = make_schedule(cfg["schedule"], c, "schedule");
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s->lr_at(401), 10.5 / 2);
  EXPECT_DOUBLE_EQ(s->lr_at(802), 10.5);
  EXPECT_LT(s->lr_at(803), 10.5);
  EXPECT_NEAR(s->lr_at(401 * 37 - 1), 1e-4, 1e-6);
  EXPECT_DOUBLE_EQ(s->lr_at(401 * 37), 1e-4);
}
