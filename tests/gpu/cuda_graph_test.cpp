// train.cuda_graph on a GPU (tools/engine/cuda_graph.h, docs/cuda_backend.md "CUDA graphs"): the same
// model built three times from one seed (a CIFAR ResNet: conv, batch norm, ReLU, shortcut, pooling,
// linear) trains the same batches with train_step: twice eagerly, once with cuda_graph = "on", the
// learning rate changing every step (a schedule: the graph reads it from the optimizer's device scalar).
// The captured copy must equal the eager one bit for bit (parameters, batch-norm statistics and
// counters, the optimizer's state, the loss each step, the loss scaler's state) when the two eager
// copies are equal bit for bit (deterministic kernels), else within 1e-5 of the largest value, and
// prints which. The update (optimizer, scaler) is inside the graph unless said. Cases:
//  - f32 SGD (momentum, nesterov), with a partial batch between replays (eager next to the graph,
//    which then replays again);
//  - f32 LARS, AdamW and SGD with clipping (their updates in the graph, clipping decided on the device);
//  - AdamW's step counts after replays, through a state round trip;
//  - f32 with accumulate = 2 and an EMA (the update in the graph, the EMA after it);
//  - fp16 with the scaler's verdict on the device, inf in some batches: skips inside replays, the
//    scale's growth and backoff read by the graph from the device;
//  - fp16 SGD with accumulate = 2 and an EMA, the verdict on the device: skips inside replays, the EMA
//    after each launch following the device's verdict (WeightEma::update's skip);
//  - fp16 AdamW with accumulate = 2 and an EMA (the verdict read back): a skip changes the host's
//    scale, which is frozen in a capture, so the step runs eagerly and is captured again;
//  - replayed steps do not wait for the host (host_wait_stats' calls unchanged);
//  - the kernels with their per-step values on the device (SGD's and LARS's lr scalar times lr_mult,
//    AdamW's rows) give the bits of the same kernels with the host's values as arguments, and
//    clipping decided on the device the bits of clip_grad_norm's host decision.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/cuda_ops.h"
#include "core/ops/elementwise.h"
#include "core/optim_kernels.h"
#include "core/host_wait.h"
#include "core/rng.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/ema.h"
#include "optim/lars.h"
#include "optim/param.h"
#include "optim/sgd.h"
#include "tests/gpu/gpu_test_util.h"
#include "tools/engine/train_step.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

struct Trainee {
  std::shared_ptr<Module> model;
  std::vector<ParamRef> params;
  std::unique_ptr<Optimizer> opt;
  StepSetup setup;
  std::unique_ptr<WeightEma> ema;
  std::vector<Tensor> ema_w;   // the EMA's averages (updated in place by WeightEma)
  std::vector<double> losses;  // each step's loss, through on_micro (weighted by share)
  double base_lr = 0;
};

Trainee make_run(StepOptions o, const std::string& graph, bool ema = false, const std::string& optimizer = "sgd") {
  manual_seed(7);
  Trainee r;
  r.model = models::build_model({{"name", "resnet_cifar"}, {"depth", 8}, {"width", 4}, {"shortcut", "A"},
                                 {"in_channels", 3}, {"num_classes", 10}},
                                "model");
  r.model->to(gpu());
  r.model->train();
  for (auto& [name, p] : r.model->named_parameters()) r.params.push_back({name, p, false});
  mark_no_decay_1d(r.params);
  if (optimizer == "lars") {
    LARSOptions lo;
    lo.lr = 0.5;
    r.opt = std::make_unique<LARS>(r.params, lo);
  } else if (optimizer == "adamw") {
    r.opt = std::make_unique<AdamW>(r.params, AdamWOptions{});
  } else {
    SGDOptions so;
    so.lr = 0.05;
    so.momentum = 0.9;
    so.nesterov = true;
    so.weight_decay = 5e-4;
    r.opt = std::make_unique<SGD>(r.params, so);
  }
  r.base_lr = r.opt->lr();
  o.cuda_graph = graph;
  r.setup = make_step_setup(o, gpu(), *r.opt);
  if (r.setup.graph) r.setup.graph->log = [](const std::string& l) { std::printf("path: %s\n", l.c_str()); };
  if (ema) {
    EmaOptions eo;
    eo.enabled = true;
    eo.decay = 0.9;
    std::vector<WeightEma::Entry> es;
    for (auto& p : r.params) {
      r.ema_w.push_back(p.param.detach().clone());
      es.push_back({p.name, p.param, r.ema_w.back(), true});
    }
    r.ema = std::make_unique<WeightEma>(eo, es);
  }
  return r;
}

Tensor batch_x(int step, int64_t n, bool bad) {
  Tensor x = rand_cpu({n, 16, 16, 3}, 500 + static_cast<uint64_t>(step));
  if (!bad) return x;
  std::vector<float> v = x.to_float_vector();
  v[11] = std::numeric_limits<float>::infinity();
  return Tensor::from_vector(v, x.shape());
}

Tensor batch_y(int64_t n) {
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) y.push_back((i * 3 + 1) % 10);
  return Tensor::from_vector(y, {n}, DType::i64);
}

void step(Trainee& r, int i, int64_t n, bool bad, int64_t t) {
  double loss = 0;
  r.opt->set_lr(r.base_lr * (1.0 - 0.07 * i));  // a schedule: another rate every step
  Tensor x = batch_x(i, n, bad).to(gpu()), y = batch_y(n).to(gpu());
  StepResult res = train_step(*r.model, *r.opt, StepBatch{x, y, Tensor()}, r.setup, [&](const MicroBatchOut& mo) {
    loss += mo.loss.item() * mo.share;
  });
  // as the trainer does: with the verdict on the device the EMA's kernels read it there
  if (r.ema && res.stepped) r.ema->update(t, res.verdict_on_device ? r.setup.scaler->last_step_skipped() : Tensor());
  r.losses.push_back(loss);
}

// Everything a step changes: parameters, buffers, the EMA's averages, the losses, the scaler's state.
std::vector<double> state_of(const Trainee& r) {
  std::vector<double> s;
  for (auto& [name, p] : r.model->named_parameters())
    for (double v : p.to_double_vector()) s.push_back(v);
  for (auto& [name, b] : r.model->named_buffers())
    for (double v : b.to_double_vector()) s.push_back(v);
  for (const Tensor& w : r.ema_w)
    for (double v : w.to_double_vector()) s.push_back(v);
  const OptimizerState os = r.opt->state_dict();
  for (const auto& [k, t] : os.tensors)
    for (double v : t.to_double_vector()) s.push_back(v);
  for (const auto& [k, v] : os.scalars) s.push_back(v);
  for (double v : r.losses) s.push_back(v);
  if (r.setup.scaler)
    for (auto& [k, v] : r.setup.scaler->state_dict()) s.push_back(v);
  return s;
}

// graph == eager bit for bit where eager == eager bit for bit; else within 1e-5 of the largest value.
void expect_same(const std::vector<double>& graph, const std::vector<double>& eager, const std::vector<double>& eager2,
                 const std::string& what) {
  ASSERT_EQ(graph.size(), eager.size());
  ASSERT_EQ(eager2.size(), eager.size());
  if (eager == eager2) {
    std::printf("path: %s: eager steps deterministic: captured steps compared bit for bit\n", what.c_str());
    size_t first = 0;
    while (first < eager.size() && (graph[first] == eager[first] || (graph[first] != graph[first] && eager[first] != eager[first])))
      ++first;
    EXPECT_EQ(first, eager.size()) << what << ": first difference at value " << first << ": "
                                   << (first < eager.size() ? graph[first] : 0) << " vs "
                                   << (first < eager.size() ? eager[first] : 0);
    return;
  }
  double m = 0;
  for (double v : eager) m = std::max(m, std::fabs(v));
  std::printf("path: %s: eager steps not deterministic: captured steps within 1e-5 * %g\n", what.c_str(), m);
  kiln::testing::expect_close(graph, eager, 1e-5 * m, 1e-5, what);
}

class CudaGraph : public gputest::Tf32OffTest {};

}  // namespace

TEST_F(CudaGraph, F32ReplaysEqualEagerStepsWithAPartialBatchBetween) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  const std::vector<int64_t> sizes = {8, 8, 8, 8, 8, 5, 8, 8};
  Trainee a = make_run({}, "off"), b = make_run({}, "off"), g = make_run({}, "on");
  ASSERT_NE(g.setup.graph, nullptr);
  for (size_t i = 0; i < sizes.size(); ++i)
    for (Trainee* r : {&a, &b, &g}) step(*r, static_cast<int>(i), sizes[i], false, static_cast<int64_t>(i));
  const GraphCounts& c = g.setup.graph->counts();
  EXPECT_EQ(c.failed_captures, 0) << "the capture failed: see the path: lines";
  EXPECT_TRUE(g.setup.graph->update_captured());
  EXPECT_EQ(c.captures, 1);
  // step 0 makes the momentum buffers and the device lr (in the key), so 1 and 2 warm up
  EXPECT_EQ(c.replays, 4);  // steps 3, 4, 6, 7
  EXPECT_EQ(c.eager, 4);    // 0, 1, 2 (warm-up) and the partial batch
  expect_same(state_of(g), state_of(a), state_of(b), "f32 sgd");
}

TEST_F(CudaGraph, Fp16SkipsInsideReplaysWithTheVerdictOnTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  StepOptions o;
  o.precision = "fp16";
  o.loss_scaler.growth_interval = 2;  // the scale grows and backs off inside the replays
  Trainee a = make_run(o, "off"), b = make_run(o, "off"), g = make_run(o, "on");
  ASSERT_TRUE(g.setup.scaler_on_device) << g.setup.verdict_reason;
  EXPECT_EQ(update_refusal(g.setup, *g.opt), "");  // unscale, verdict, step and scale update in the graph
  const std::vector<bool> bad = {false, false, false, true, false, false, true, false, false};  // 3: the capture's
  for (size_t i = 0; i < bad.size(); ++i)
    for (Trainee* r : {&a, &b, &g}) step(*r, static_cast<int>(i), 8, bad[i], static_cast<int64_t>(i));
  const GraphCounts& c = g.setup.graph->counts();
  EXPECT_EQ(c.failed_captures, 0) << "the capture failed: see the path: lines";
  EXPECT_EQ(c.captures, 1);
  // step 0 scales on the host (the scaler's device state is made by its first unscale), so the key
  // changes once: steps 1 and 2 warm up, step 3 is captured (with inf in it) and replayed.
  EXPECT_EQ(c.replays, static_cast<int64_t>(bad.size()) - 3);
  EXPECT_EQ(g.setup.scaler->skipped_steps(), 2);
  EXPECT_EQ(g.setup.scaler->state_dict(), a.setup.scaler->state_dict());
  expect_same(state_of(g), state_of(a), state_of(b), "fp16 sgd, verdict on the device");
}

TEST_F(CudaGraph, Fp16SgdAccumulateTwoAndEmaFollowTheDeviceVerdict) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  StepOptions o;
  o.precision = "fp16";
  o.accumulate = 2;
  Trainee a = make_run(o, "off", true), b = make_run(o, "off", true), g = make_run(o, "on", true);
  ASSERT_TRUE(g.setup.scaler_on_device) << g.setup.verdict_reason;
  const std::vector<bool> bad = {false, false, false, false, true, false, false, true, false};
  for (size_t i = 0; i < bad.size(); ++i)
    for (Trainee* r : {&a, &b, &g}) step(*r, static_cast<int>(i), 8, bad[i], static_cast<int64_t>(i));
  const GraphCounts& c = g.setup.graph->counts();
  EXPECT_EQ(c.failed_captures, 0) << "the capture failed: see the path: lines";
  EXPECT_EQ(c.captures, 1);  // the update in the graph: the scale is read on the device, no recapture
  EXPECT_GE(c.replays, 4);
  EXPECT_EQ(g.setup.scaler->skipped_steps(), 2);
  expect_same(state_of(g), state_of(a), state_of(b), "fp16 sgd accumulate 2 with EMA, verdict on the device");
}

TEST_F(CudaGraph, Fp16AccumulateTwoAndEmaRecaptureAfterTheHostScaleChanges) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  StepOptions o;
  o.precision = "fp16";
  o.accumulate = 2;
  Trainee a = make_run(o, "off", true, "adamw"), b = make_run(o, "off", true, "adamw"),
          g = make_run(o, "on", true, "adamw");
  ASSERT_FALSE(g.setup.scaler_on_device);  // AdamW reads the verdict
  const std::vector<bool> bad = {false, false, false, true, false, false, false, false};
  for (size_t i = 0; i < bad.size(); ++i)
    for (Trainee* r : {&a, &b, &g}) step(*r, static_cast<int>(i), 8, bad[i], static_cast<int64_t>(i));
  const GraphCounts& c = g.setup.graph->counts();
  EXPECT_EQ(c.failed_captures, 0) << "the capture failed: see the path: lines";
  // captured at step 2, replayed at 3 (skipped: the scale halves), eager at 4 and 5, captured at 6
  EXPECT_EQ(c.captures, 2);
  EXPECT_EQ(c.replays, 4);
  EXPECT_EQ(g.setup.scaler->skipped_steps(), 1);
  expect_same(state_of(g), state_of(a), state_of(b), "fp16 accumulate 2 with EMA");
}

TEST_F(CudaGraph, ReplayedStepsDoNotWaitForTheHost) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  StepOptions o;
  o.precision = "fp16";  // the verdict on the device: nothing in the step reads back
  Trainee g = make_run(o, "on");
  ASSERT_TRUE(g.setup.scaler_on_device) << g.setup.verdict_reason;
  for (int i = 0; i < 10; ++i) {
    Tensor x = batch_x(i, 8, i == 6).to(gpu()), y = batch_y(8).to(gpu());  // uploads wait: before the count
    const HostWaitStats before = host_wait_stats();
    g.opt->set_lr(0.05 / (i + 1));  // written to the device before the launch: no wait either
    train_step(*g.model, *g.opt, StepBatch{x, y, Tensor()}, g.setup);
    if (i >= 4) {
      EXPECT_EQ(host_wait_stats().calls, before.calls) << "replayed step " << i << " waited for the GPU";
    }
  }
  EXPECT_EQ(g.setup.graph->counts().captures, 1);
  EXPECT_EQ(g.setup.graph->counts().replays, 7);  // 0: host-side scale; 1, 2: warm-up; 3: captured
  EXPECT_EQ(g.setup.scaler->skipped_steps(), 1);
}

// The other optimizers and clipping, f32, all with the schedule, their updates in the graph: LARS
// (its trust ratios on the device), AdamW (its per-step values written to the device before each
// launch), SGD clipped to a norm its gradients exceed (the coefficient computed on the device).
TEST_F(CudaGraph, LarsAdamWAndClippedSgdReplaysEqualEagerSteps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  struct Case {
    std::string optimizer;
    double clip;
    bool captured;
  };
  for (const Case& k : {Case{"lars", 0, true}, Case{"adamw", 0, true}, Case{"sgd", 0.05, true}}) {
    SCOPED_TRACE(k.optimizer);
    StepOptions o;
    o.clip_grad_norm = k.clip;
    Trainee a = make_run(o, "off", false, k.optimizer), b = make_run(o, "off", false, k.optimizer),
            g = make_run(o, "on", false, k.optimizer);
    for (int i = 0; i < 7; ++i)
      for (Trainee* r : {&a, &b, &g}) step(*r, i, 8, false, i);
    const GraphCounts& c = g.setup.graph->counts();
    EXPECT_EQ(c.failed_captures, 0) << "the capture failed: see the path: lines";
    EXPECT_EQ(g.setup.graph->update_captured(), k.captured) << update_refusal(g.setup, *g.opt);
    EXPECT_EQ(c.captures, 1);
    EXPECT_EQ(c.replays, 4);  // 0 makes the state (in the key), 1 and 2 warm up, 3 is captured
    expect_same(state_of(g), state_of(a), state_of(b), k.optimizer + (k.clip > 0 ? " clipped" : ""));
  }
}

// f32 with accumulate = 2 and an EMA: both micro-batches and the update in the graph, the EMA (the
// trainer's, a host decay) eager after each replay, reading the weights the replay wrote.
TEST_F(CudaGraph, F32AccumulateTwoAndEmaWithTheUpdateInTheGraph) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  StepOptions o;
  o.accumulate = 2;
  Trainee a = make_run(o, "off", true), b = make_run(o, "off", true), g = make_run(o, "on", true);
  for (int i = 0; i < 7; ++i)
    for (Trainee* r : {&a, &b, &g}) step(*r, i, 8, false, i);
  const GraphCounts& c = g.setup.graph->counts();
  EXPECT_EQ(c.failed_captures, 0) << "the capture failed: see the path: lines";
  EXPECT_TRUE(g.setup.graph->update_captured()) << update_refusal(g.setup, *g.opt);
  EXPECT_EQ(c.captures, 1);
  EXPECT_EQ(c.replays, 4);  // 0 makes the state, 1 and 2 warm up, 3 is captured
  expect_same(state_of(g), state_of(a), state_of(b), "f32 accumulate 2 with EMA");
}

// AdamW's step counts (checkpointed as "<param>.step") stay the host's, counted per replay.
TEST_F(CudaGraph, AdamWStepCountsSurviveACheckpointRoundTripAfterReplays) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  Trainee g = make_run({}, "on", false, "adamw");
  for (int i = 0; i < 6; ++i) step(g, i, 8, false, i);
  EXPECT_TRUE(g.setup.graph->update_captured());
  EXPECT_EQ(g.setup.graph->counts().replays, 3);  // 0 makes the moments, 1 and 2 warm up, 3 .. 5
  const OptimizerState s = g.opt->state_dict();
  ASSERT_FALSE(s.scalars.empty());
  for (const auto& [k, v] : s.scalars) EXPECT_EQ(v, 6.0) << k;
  Trainee h = make_run({}, "off", false, "adamw");
  h.opt->load_state_dict(s);
  EXPECT_EQ(h.opt->state_dict().scalars, s.scalars);
}

#ifdef KILN_WITH_CUDA  // the CUDA backend's kernels called directly: a CPU-only build has none to link
TEST_F(CudaGraph, DeviceValuesGiveTheBitsOfTheHostValues) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  const int64_t n = 40000;  // several 16K chunks
  const double lr = 0.1, mult = 0.3, wd = 5e-4;
  auto same = [](const Tensor& a, const Tensor& b, const char* what) {
    EXPECT_EQ(a.to_double_vector(), b.to_double_vector()) << what;
  };
  Tensor g = rand_cpu({n}, 2).to(gpu());
  Tensor lr_dev = Tensor::full({}, lr, DType::f64, gpu());
  {  // SGD, nesterov: the first step (buf = g) and a second
    Tensor pa = rand_cpu({n}, 1).to(gpu()), pb = pa.clone();
    Tensor ma = Tensor::zeros({n}, DType::f32, gpu()), mb = Tensor::zeros({n}, DType::f32, gpu());
    for (int s = 0; s < 2; ++s) {
      SgdStepEntry a{pa, g, ma, lr * mult, wd, 1.0, s == 0};
      SgdStepEntry b{pb, g, mb, 123.0, wd, mult, s == 0};  // lr unused: the device's times lr_mult
      cuda::sgd_step({a}, {0.9, 0.0, true, Tensor(), Tensor()});
      cuda::sgd_step({b}, {0.9, 0.0, true, Tensor(), lr_dev});
    }
    same(pb, pa, "sgd weights");
    same(mb, ma, "sgd momentum");
  }
  {  // LARS
    Tensor pa = rand_cpu({n}, 3).to(gpu()), pb = pa.clone();
    Tensor ma = Tensor::zeros({n}, DType::f32, gpu()), mb = Tensor::zeros({n}, DType::f32, gpu());
    for (int s = 0; s < 2; ++s) {
      LarsStepEntry a{pa, g, ma, lr * mult, wd, 1.0, true};
      LarsStepEntry b{pb, g, mb, 123.0, wd, mult, true};
      cuda::lars_step({a}, {0.9, 0.001, 0.0, false, Tensor(), Tensor()});
      cuda::lars_step({b}, {0.9, 0.001, 0.0, false, Tensor(), lr_dev});
    }
    same(pb, pa, "lars weights");
    same(mb, ma, "lars momentum");
  }
  {  // AdamW at step 3: the row's values as AdamW::write_step_values computes them
    Tensor pa = rand_cpu({n}, 4).to(gpu()), pb = pa.clone();
    Tensor m = rand_cpu({n}, 5).to(gpu()), v = rand_cpu({n}, 6).to(gpu());
    Tensor va = ops::mul(v, v), vb = va.clone(), ma = m, mb = m.clone();  // v >= 0
    const double alr = 1e-3 * mult, b1 = 0.9, b2 = 0.999;
    const std::vector<float> row = {static_cast<float>(1.0 - alr * wd), static_cast<float>(alr / (1.0 - std::pow(b1, 3.0))),
                                    static_cast<float>(std::sqrt(1.0 - std::pow(b2, 3.0)))};
    Tensor values = Tensor::zeros({2, 3}, DType::f32, gpu());
    write_values_kernel.get(gpu(), "test")(values, {0, 0, 0, row[0], row[1], row[2]});
    AdamWStepEntry a{pa, g, ma, va, Tensor(), alr, wd, 3, 0};
    AdamWStepEntry b{pb, g, mb, vb, Tensor(), 7.0, 0.5, 9, 1};  // lr, wd, step unused: row 1
    cuda::adamw_step({a}, {b1, b2, 1e-8, Tensor()});
    cuda::adamw_step({b}, {b1, b2, 1e-8, values});
    same(pb, pa, "adamw weights");
    same(mb, ma, "adamw exp_avg");
    same(vb, va, "adamw exp_avg_sq");
  }
  for (double max_norm : {1.0, 1e6}) {  // clipping decided on the device: clips, then leaves as is
    Tensor ga = rand_cpu({n}, 7).to(gpu()), gb = ga.clone(), ha = rand_cpu({300}, 8).to(gpu()), hb = ha.clone();
    const double norm = std::sqrt(cuda::sum_of_squares({ga, ha}));
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) cuda::unscale_and_check_finite({ga, ha}, coef);  // clip_grad_norm's host decision
    cuda::clip_grad_norm_on_device({gb, hb}, max_norm);
    same(gb, ga, "clipped gradient");
    same(hb, ha, "clipped gradient 2");
    if (max_norm > 1e5) same(gb, rand_cpu({n}, 7).to(gpu()), "an unclipped gradient");
  }
  {  // a non-finite norm leaves the gradients as they are (clip_grad_norm's rule)
    std::vector<float> v(100, 1.0f);
    v[3] = std::numeric_limits<float>::infinity();
    Tensor gi = Tensor::from_vector(v, {100}).to(gpu());
    cuda::clip_grad_norm_on_device({gi}, 1.0);
    EXPECT_EQ(gi.to_float_vector(), v);
  }
}
#endif  // KILN_WITH_CUDA
