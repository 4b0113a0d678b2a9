// The shared training step (tools/engine/train_step.h), on a tiny conv net without batch norm:
//  - N micro-batches take the step of the whole batch; the loss read is the batch's mean loss;
//  - update = false (AutoBatch's probe) leaves the weights alone and the gradients in place;
//  - a non-finite loss takes no step: without a scaler it is reported (finite = false), with one
//    the step is skipped and the scale backs off; with the scaler's verdict kept on the device (a
//    GPU step's way) the steps taken are the same;
//  - the step is deterministic (bit-exact twice from the same weights);
//  - the optimizer's state size (AutoBatch adds it to the probe) is what its state_dict holds;
//  - make_step_setup's decisions: the scaler, where its verdict is taken and why, each caller's use.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/device.h"
#include "core/ops/loss.h"
#include "core/rng.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/ema.h"
#include "optim/sgd.h"
#include "tools/engine/train_step.h"

using namespace kiln;

namespace {

std::shared_ptr<Module> tiny_net() {
  manual_seed(7);
  return models::build_model(json::parse(R"({"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1},
      {"type": "relu"},
      {"type": "max_pool2d", "kernel_size": 2},
      {"type": "flatten"},
      {"type": "linear", "in_features": 64, "out_features": 5}]})"),
                             "model");
}

std::vector<ParamRef> params_of(Module& m) {
  std::vector<ParamRef> ps;
  for (auto& [name, p] : m.named_parameters()) ps.push_back({name, p, false});
  return ps;
}

struct Problem {
  Tensor x, y;
};

Problem problem(int64_t n) {
  Generator g(11);
  Problem p;
  p.x = rand_normal({n, 8, 8, 3}, 0, 1, DType::f32, Device::cpu(), &g);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back((i * 3) % 5);
  p.y = Tensor::from_vector(labels, {n});
  return p;
}

std::vector<double> flat_weights(Module& m) {
  std::vector<double> w;
  for (auto& [name, p] : m.named_parameters())
    for (double v : p.to_double_vector()) w.push_back(v);
  return w;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

SGDOptions sgd_options() {
  SGDOptions o;
  o.lr = 0.5;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 1e-3;
  return o;
}

}  // namespace

TEST(TrainStep, MicroBatchesTakeTheStepOfTheWholeBatch) {
  const Problem pb = problem(12);
  std::vector<std::vector<double>> after;
  std::vector<double> losses;
  for (int64_t n : {1, 3, 5}) {  // 5 does not divide 12: micro-batches of 3,3,2,2,2
    auto m = tiny_net();
    SGD opt(params_of(*m), sgd_options());
    StepSetup s;
    s.accumulate = n;
    s.label_smoothing = 0.1;
    s.clip_grad_norm = 0.5;
    int64_t calls = 0, samples = 0;
    double shares = 0;
    StepResult r{};
    for (int step = 0; step < 3; ++step)
      r = train_step(*m, opt, StepBatch{pb.x, pb.y, Tensor()}, s, [&](const MicroBatchOut& mo) {
        EXPECT_EQ(mo.index, calls % n);
        ++calls;
        samples += mo.size;
        shares += mo.share;
      });
    EXPECT_TRUE(r.stepped && r.finite);
    EXPECT_EQ(calls, 3 * n);
    EXPECT_EQ(samples, 3 * 12);
    EXPECT_NEAR(shares, 3.0, 1e-12);
    after.push_back(flat_weights(*m));
    losses.push_back(r.loss);
  }
  EXPECT_LT(max_diff(after[0], after[1]), 1e-5);
  EXPECT_LT(max_diff(after[0], after[2]), 1e-5);
  EXPECT_NEAR(losses[0], losses[1], 1e-5);
  EXPECT_NEAR(losses[0], losses[2], 1e-5);
  // The weights moved, and the loss read is the batch's label-smoothed cross-entropy after two steps.
  auto fresh = tiny_net();
  EXPECT_GT(max_diff(after[0], flat_weights(*fresh)), 1e-3);
}

TEST(TrainStep, TheLossReadIsTheBatchMeanBeforeTheUpdate) {
  const Problem pb = problem(10);
  auto m = tiny_net();
  const double expected = ops::cross_entropy(m->forward(pb.x), pb.y, 0.1).item();
  SGD opt(params_of(*m), sgd_options());
  StepSetup s;
  s.label_smoothing = 0.1;
  s.accumulate = 4;
  StepResult r = train_step(*m, opt, StepBatch{pb.x, pb.y, Tensor()}, s);
  EXPECT_NEAR(r.loss, expected, 1e-5);
  ASSERT_TRUE(r.last_loss.defined());
}

TEST(TrainStep, TheStepIsBitExactFromTheSameWeights) {
  const Problem pb = problem(9);
  std::vector<std::vector<double>> runs;
  for (int k = 0; k < 2; ++k) {
    auto m = tiny_net();
    AdamW opt(params_of(*m), AdamWOptions{});
    StepSetup s;
    s.accumulate = 2;
    for (int step = 0; step < 2; ++step) train_step(*m, opt, StepBatch{pb.x, pb.y, Tensor()}, s);
    runs.push_back(flat_weights(*m));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(TrainStep, WithoutUpdateTheGradientsStayAndTheWeightsDoNot) {
  const Problem pb = problem(6);
  auto m = tiny_net();
  const std::vector<double> before = flat_weights(*m);
  SGD opt(params_of(*m), sgd_options());
  StepSetup s;
  s.update = false;
  s.read_loss = false;
  StepResult r = train_step(*m, opt, StepBatch{pb.x, pb.y, Tensor()}, s);
  EXPECT_FALSE(r.stepped);
  EXPECT_EQ(flat_weights(*m), before);
  double g2 = 0;
  for (const ParamRef& p : opt.params()) {
    ASSERT_TRUE(p.param.grad().defined()) << p.name;
    for (double v : p.param.grad().to_double_vector()) g2 += v * v;
  }
  EXPECT_GT(g2, 0);
}

TEST(TrainStep, ANonFiniteLossTakesNoStep) {
  Problem pb = problem(6);
  std::vector<float> bad(static_cast<size_t>(pb.x.numel()), 1.0f);
  bad[5] = std::numeric_limits<float>::infinity();
  pb.x = Tensor::from_vector(bad, pb.x.shape());
  {  // no scaler: reported to the caller, no step
    auto m = tiny_net();
    const std::vector<double> before = flat_weights(*m);
    SGD opt(params_of(*m), sgd_options());
    StepResult r = train_step(*m, opt, StepBatch{pb.x, pb.y, Tensor()}, StepSetup{});
    EXPECT_FALSE(r.finite);
    EXPECT_FALSE(r.stepped);
    EXPECT_FALSE(std::isfinite(r.loss));
    EXPECT_EQ(flat_weights(*m), before);
  }
  {  // fp16 loss scaler: the step is skipped, counted, and the scale backs off
    auto m = tiny_net();
    const std::vector<double> before = flat_weights(*m);
    SGD opt(params_of(*m), sgd_options());
    StepSetup s;
    s.scaler = std::make_shared<LossScaler>();
    StepResult r = train_step(*m, opt, StepBatch{pb.x, pb.y, Tensor()}, s);
    EXPECT_FALSE(r.finite);
    EXPECT_FALSE(r.stepped);
    EXPECT_EQ(s.scaler->skipped_steps(), 1);
    EXPECT_EQ(s.scaler->scale(), 32768.0);
    EXPECT_EQ(flat_weights(*m), before);
    // A finite batch then steps, with the gradients unscaled (the same weights as without a scaler).
    const Problem good = problem(6);
    r = train_step(*m, opt, StepBatch{good.x, good.y, Tensor()}, s);
    EXPECT_TRUE(r.stepped);
    auto ref = tiny_net();
    SGD ref_opt(params_of(*ref), sgd_options());
    train_step(*ref, ref_opt, StepBatch{good.x, good.y, Tensor()}, StepSetup{});
    EXPECT_LT(max_diff(flat_weights(*m), flat_weights(*ref)), 1e-6);
  }
}

TEST(TrainStep, SoftTargetsReplaceTheLabelsInTheLoss) {
  const Problem pb = problem(4);
  std::vector<float> t(4 * 5, 0.0f);
  for (int i = 0; i < 4; ++i) t[static_cast<size_t>(i * 5 + (i + 1) % 5)] = 1.0f;  // not the labels
  Tensor targets = Tensor::from_vector(t, {4, 5});
  auto m = tiny_net();
  const double expected = ops::soft_cross_entropy(m->forward(pb.x), targets).item();
  SGD opt(params_of(*m), sgd_options());
  StepSetup s;
  s.label_smoothing = 0.3;  // soft targets carry their own smoothing: not applied again
  StepResult r = train_step(*m, opt, StepBatch{pb.x, pb.y, targets}, s);
  EXPECT_NEAR(r.loss, expected, 1e-5);
}

TEST(OptimizerState, StateBytesIsWhatTheStateDictHolds) {
  const Problem pb = problem(4);
  auto state_dict_bytes = [](const Optimizer& o) {
    double b = 0;
    for (auto& [k, t] : o.state_dict().tensors) b += static_cast<double>(t.nbytes());
    return b;
  };
  auto check = [&](Optimizer& o, int slots) {
    EXPECT_EQ(o.state_slots(), slots);
    double numel = 0;
    for (const ParamRef& p : o.params()) numel += static_cast<double>(p.param.numel());
    EXPECT_EQ(o.state_bytes(), 4.0 * slots * numel);
  };
  auto m = tiny_net();
  SGDOptions plain = sgd_options();
  plain.momentum = 0;
  plain.nesterov = false;
  SGD sgd0(params_of(*m), plain);
  check(sgd0, 0);
  SGD sgd(params_of(*m), sgd_options());
  check(sgd, 1);
  AdamW adam(params_of(*m), AdamWOptions{});
  check(adam, 2);
  AdamWOptions ams;
  ams.amsgrad = true;
  AdamW adam_ams(params_of(*m), ams);
  check(adam_ams, 3);
  for (Optimizer* o : std::initializer_list<Optimizer*>{&sgd0, &sgd, &adam, &adam_ams}) {
    train_step(*m, *o, StepBatch{pb.x, pb.y, Tensor()}, StepSetup{});
    EXPECT_EQ(state_dict_bytes(*o), o->state_bytes()) << o->type() << " slots " << o->state_slots();
  }
}

// scaler_on_device (how an fp16 step runs on a GPU, here on CPU tensors): the skip decision stays
// with the tensors, and the steps taken, the weights and the scaler's state equal those of the
// host-mode step, batch after batch, over non-finite batches (the first one included), without and
// with clipping (decided on the device too: clip_grad_norm_on_device, after the unscale; a skipped
// step's gradients are not used), and an EMA of each (the device one following the scaler's flag).
// AdamW (host-side step counts) is refused with the reason.
TEST(TrainStep, TheVerdictOnTheDeviceTakesTheHostModesSteps) {
  Problem bad = problem(6);
  std::vector<float> v(static_cast<size_t>(bad.x.numel()), 1.0f);
  v[5] = std::numeric_limits<float>::infinity();
  bad.x = Tensor::from_vector(v, bad.x.shape());
  StepSetup dev_setup;
  for (double clip : {0.0, 0.05}) {
    SCOPED_TRACE("clip_grad_norm " + std::to_string(clip));
    auto host_net = tiny_net(), dev_net = tiny_net();
    SGDOptions o = sgd_options();
    o.nesterov = false;
    o.dampening = 0.1;
    SGD host_opt(params_of(*host_net), o), dev_opt(params_of(*dev_net), o);
    LossScalerOptions so;
    so.growth_interval = 2;
    StepSetup host_setup;
    host_setup.scaler = std::make_shared<LossScaler>(so);
    host_setup.read_loss = false;
    host_setup.clip_grad_norm = clip;
    dev_setup = host_setup;
    dev_setup.scaler = std::make_shared<LossScaler>(so);
    dev_setup.scaler_on_device = true;
    const LossScaler& host_scaler = *host_setup.scaler;
    const LossScaler& dev_scaler = *dev_setup.scaler;
    // An EMA of each, as the trainer keeps it: after a step taken (host mode), or every step with the
    // scaler's flag (device mode: the kernels leave it as it is after a skipped step).
    EmaOptions eo;
    eo.enabled = true;
    eo.decay = 0.9;
    auto ema_of = [&](Module& net, std::vector<Tensor>& avg) {
      std::vector<WeightEma::Entry> es;
      for (auto& [name, t] : net.named_parameters()) {
        avg.push_back(t.detach().clone());
        es.push_back({name, t, avg.back(), true});
      }
      return WeightEma(eo, es);
    };
    std::vector<Tensor> host_avg, dev_avg;
    WeightEma host_ema = ema_of(*host_net, host_avg), dev_ema = ema_of(*dev_net, dev_avg);
    int k = 0;
    int64_t t = 0;
    for (bool is_bad : {true, false, false, true, false, false, false}) {
      const Problem pb = is_bad ? bad : problem(6 + k++);
      StepResult rh = train_step(*host_net, host_opt, StepBatch{pb.x, pb.y, Tensor()}, host_setup);
      StepResult rd = train_step(*dev_net, dev_opt, StepBatch{pb.x, pb.y, Tensor()}, dev_setup);
      EXPECT_EQ(rh.stepped, !is_bad);
      EXPECT_FALSE(rh.verdict_on_device);
      EXPECT_TRUE(rd.verdict_on_device);
      if (rh.stepped) host_ema.update(t);
      if (rd.stepped) dev_ema.update(t, dev_scaler.last_step_skipped());
      ++t;
      EXPECT_EQ(flat_weights(*dev_net), flat_weights(*host_net));
      EXPECT_EQ(dev_scaler.state_dict(), host_scaler.state_dict());
      for (size_t i = 0; i < host_avg.size(); ++i)
        EXPECT_EQ(dev_avg[i].to_double_vector(), host_avg[i].to_double_vector()) << "EMA tensor " << i;
    }
    EXPECT_EQ(dev_scaler.skipped_steps(), 2);
  }
  dev_setup.clip_grad_norm = 0;
  const Problem good = problem(6);
  {
    auto m = tiny_net();
    AdamW adamw(params_of(*m));
    StepSetup setup = dev_setup;
    setup.scaler = std::make_shared<LossScaler>();
    try {
      train_step(*m, adamw, StepBatch{good.x, good.y, Tensor()}, setup);
      ADD_FAILURE() << "AdamW with the verdict on the device";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("adamw reads the loss scaler's verdict instead"), std::string::npos)
          << e.what();
    }
  }
}

// make_step_setup: the one rule for every caller's step (the trainer, AutoBatch's probe, the benches,
// the GPU tests). fp16 gets a loss scaler of train.loss_scaler, bf16 and fp32 none; the verdict stays
// on the device only where nothing else would be read back there (a device whose reads block, an
// optimizer that skips on the device; clipping and the EMA follow it there), with the reason; the CPU reads the loss
// each step for the trainer, never for the benches; the probe takes no step.
TEST(MakeStepSetup, PrecisionDecidesTheComputeDtypeAndTheScaler) {
  auto m = tiny_net();
  SGD sgd(params_of(*m), sgd_options());
  StepOptions o;
  o.precision = "fp16";
  o.loss_scaler.init_scale = 1024;
  StepSetup s = make_step_setup(o, Device::cpu(), sgd);
  EXPECT_EQ(s.compute, DType::f16);
  ASSERT_TRUE(s.scaler);
  EXPECT_EQ(s.scaler->scale(), 1024.0);
  EXPECT_FALSE(s.scaler_on_device);  // the CPU's reads are free: the verdict is read
  EXPECT_NE(s.verdict_reason.find("read back: reading from cpu is free"), std::string::npos) << s.verdict_reason;
  EXPECT_TRUE(s.read_loss);
  EXPECT_TRUE(s.update);
  for (const char* p : {"bf16", "fp32"}) {
    o.precision = p;
    s = make_step_setup(o, Device::cpu(), sgd);
    EXPECT_EQ(s.compute, std::string(p) == "bf16" ? DType::bf16 : DType::f32) << p;
    EXPECT_FALSE(s.scaler) << p;
    EXPECT_FALSE(s.scaler_on_device) << p;
    EXPECT_EQ(s.verdict_reason, "") << p;
  }
}

TEST(MakeStepSetup, TheVerdictStaysOnTheDeviceOnlyWhereNothingElseIsReadBack) {
  // A CUDA device as a value: make_step_setup only decides, nothing runs there; whether its reads
  // block is the CUDA backend's answer (core/device.h reads_block), so this needs a CUDA build.
  if (!cuda_compiled()) GTEST_SKIP() << "a CPU-only build has no CUDA device to decide for";
  const Device gpu = Device::cuda(0);
  auto m = tiny_net();
  SGD sgd(params_of(*m), sgd_options());
  AdamW adamw(params_of(*m));
  StepOptions o;
  o.precision = "fp16";
  StepSetup s = make_step_setup(o, gpu, sgd);
  EXPECT_TRUE(s.scaler_on_device);
  EXPECT_FALSE(s.read_loss);  // a GPU step reads nothing back; the trainer keeps its statistics there
  EXPECT_NE(s.verdict_reason.find("on the device"), std::string::npos) << s.verdict_reason;
  s = make_step_setup(o, gpu, adamw);
  EXPECT_FALSE(s.scaler_on_device);
  EXPECT_NE(s.verdict_reason.find("adamw steps on the host's verdict"), std::string::npos) << s.verdict_reason;
  StepOptions clip = o;  // clipping is decided on the device too (clip_grad_norm_on_device)
  clip.clip_grad_norm = 1.0;
  s = make_step_setup(clip, gpu, sgd);
  EXPECT_TRUE(s.scaler_on_device);
  EXPECT_EQ(s.clip_grad_norm, 1.0);
  EXPECT_NE(s.verdict_reason.find("on the device"), std::string::npos) << s.verdict_reason;
}

TEST(MakeStepSetup, TheRunsOptionsAndEachUse) {
  auto m = tiny_net();
  SGD sgd(params_of(*m), sgd_options());
  TrainOptions t;
  t.precision = "fp16";
  t.label_smoothing = 0.2;
  t.accumulate = 3;
  t.clip_grad_norm = 2.0;
  t.ema.enabled = true;
  StepOptions o = step_options(t);
  EXPECT_EQ(o.precision, "fp16");
  o.class_weights = Tensor::from_vector(std::vector<double>{1, 2, 1, 1, 1}, {5}, DType::f32);
  StepSetup s = make_step_setup(o, Device::cpu(), sgd);
  EXPECT_EQ(s.label_smoothing, 0.2);
  EXPECT_EQ(s.accumulate, 3);
  EXPECT_EQ(s.clip_grad_norm, 2.0);
  EXPECT_TRUE(s.class_weights.defined());
  EXPECT_TRUE(s.read_loss && s.update && s.scaler);
  // The benches (StepUse::time): the trainer's step, the loss never read, so a step is timed alone.
  o.use = StepUse::time;
  s = make_step_setup(o, Device::cpu(), sgd);
  EXPECT_FALSE(s.read_loss);
  EXPECT_TRUE(s.update);
  EXPECT_TRUE(s.scaler);
  EXPECT_EQ(s.accumulate, 3);
  // AutoBatch's probe: one micro-batch's forward and backward, with the loss's own options.
  o.use = StepUse::probe;
  s = make_step_setup(o, Device::cpu(), sgd);
  EXPECT_FALSE(s.read_loss);
  EXPECT_FALSE(s.update);
  EXPECT_FALSE(s.scaler);
  EXPECT_EQ(s.accumulate, 1);
  EXPECT_EQ(s.clip_grad_norm, 0.0);
  EXPECT_EQ(s.label_smoothing, 0.2);
  EXPECT_TRUE(s.class_weights.defined());
  EXPECT_EQ(s.compute, DType::f16);
}

// A bench's step (StepUse::time) takes the trainer's step: the same weights after it.
TEST(MakeStepSetup, TheBenchesStepIsTheTrainersStep) {
  const Problem pb = problem(8);
  auto a = tiny_net(), b = tiny_net();
  SGD oa(params_of(*a), sgd_options()), ob(params_of(*b), sgd_options());
  StepOptions o;
  o.label_smoothing = 0.1;
  const StepSetup train = make_step_setup(o, Device::cpu(), oa);
  o.use = StepUse::time;
  const StepSetup bench = make_step_setup(o, Device::cpu(), ob);
  for (int step = 0; step < 2; ++step) {
    train_step(*a, oa, StepBatch{pb.x, pb.y, Tensor()}, train);
    train_step(*b, ob, StepBatch{pb.x, pb.y, Tensor()}, bench);
  }
  EXPECT_EQ(flat_weights(*a), flat_weights(*b));
}
