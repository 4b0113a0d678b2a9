// Whole training steps on a GPU against the same steps on the CPU, through the trainer's step
// (train_step with make_step_setup's setup, tools/engine/train_step.h): one model built twice from
// the same seed (one copy moved with Module::to), the same batch, forward, cross-entropy, backward and
// the optimizer step; then loss, every parameter's gradient and the batch-norm running statistics must
// match, and every parameter after the steps (SGD with momentum, Nesterov, weight decay and a
// no-decay group; AdamW with amsgrad; gradient clipping; the fp16 loss scaler's unscale, on the host
// and with its verdict kept on the GPU). Models: a CIFAR ResNet (depth 8, width 4, shortcut A: conv, batch norm,
// ReLU, slicing and concat, global pooling, linear) and LeNet (max pooling, dropout, linear).
// Convolutions run with TF32 off so the f32 tolerances can stay tight.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/host_wait.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "core/rng.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/param.h"
#include "optim/sgd.h"
#include "tests/gpu/gpu_test_util.h"
#include "tools/engine/train_step.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

struct Replica {
  std::shared_ptr<Module> model;
  std::vector<ParamRef> params;
  Device device;
};

Replica make_replica(const json& model_cfg, Device d) {
  manual_seed(7);  // same initial weights for both replicas
  Replica r;
  r.model = models::build_model(model_cfg, "model");
  r.model->to(d);
  r.model->train();
  for (auto& [name, p] : r.model->named_parameters()) r.params.push_back({name, p, false});
  mark_no_decay_1d(r.params);
  r.device = d;
  return r;
}

// The step's setup on `d` as the trainer builds it (make_step_setup), label smoothing 0.1.
// NOTE: fp16's setup (its loss scaler, where its verdict is taken) computes in f32 here, so that the
// CPU comparison keeps its tight tolerances.
StepSetup setup_on(StepOptions o, Device d, const Optimizer& opt) {
  o.label_smoothing = 0.1;
  StepSetup s = make_step_setup(o, d, opt);
  s.compute = DType::f32;
  return s;
}

// One training step on `r` with the batch (x, y) (either device); dropout masks from the same seed on
// both devices.
StepResult step_on(Replica& r, Optimizer& opt, const Tensor& x, const Tensor& y, const StepSetup& s) {
  manual_seed(99);
  return train_step(*r.model, opt, StepBatch{x, y, Tensor()}, s);
}

// |gpu - cpu| <= rel * (max|cpu| + |cpu|) per tensor.
void expect_tensor_close(const Tensor& g, const Tensor& c, double rel, const std::string& what) {
  ASSERT_TRUE(g.defined() && c.defined()) << what;
  EXPECT_EQ(g.device(), gpu()) << what;
  std::vector<double> want = c.to_double_vector();
  double m = 0;
  for (double v : want) m = std::max(m, std::fabs(v));
  kiln::testing::expect_close(g.to_double_vector(), want, rel * std::max(m, 1e-12), rel, what);
}

void expect_grads_close(const Replica& g, const Replica& c, double rel) {
  ASSERT_EQ(g.params.size(), c.params.size());
  for (size_t i = 0; i < c.params.size(); ++i)
    expect_tensor_close(g.params[i].param.grad(), c.params[i].param.grad(), rel, "grad " + c.params[i].name);
}

void expect_params_close(const Replica& g, const Replica& c, double rel) {
  for (size_t i = 0; i < c.params.size(); ++i)
    expect_tensor_close(g.params[i].param, c.params[i].param, rel, "param " + c.params[i].name);
  auto bg = g.model->named_buffers(), bc = c.model->named_buffers();
  ASSERT_EQ(bg.size(), bc.size());
  for (size_t i = 0; i < bc.size(); ++i) {
    if (!is_floating(bc[i].second.dtype())) {
      EXPECT_EQ(bg[i].second.to_int_vector(), bc[i].second.to_int_vector()) << bc[i].first;
      continue;
    }
    expect_tensor_close(bg[i].second, bc[i].second, rel, "buffer " + bc[i].first);
  }
}

class TrainStepOnGpu : public gputest::Tf32OffTest {};

json resnet_cfg() {
  return {{"name", "resnet_cifar"}, {"depth", 8}, {"width", 4}, {"shortcut", "A"}, {"in_channels", 3},
          {"num_classes", 10}};
}
json lenet_cfg() { return {{"name", "lenet"}, {"in_channels", 1}, {"num_classes", 10}, {"dropout", 0.5}}; }

Tensor labels_for(int64_t n) {
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) y.push_back((i * 3 + 1) % 10);
  return Tensor::from_vector(y, {n}, DType::i64);
}

}  // namespace

TEST_F(TrainStepOnGpu, ResNetSgdStepsMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  Replica c = make_replica(resnet_cfg(), Device::cpu()), g = make_replica(resnet_cfg(), gpu());
  SGDOptions so;
  so.lr = 0.05;
  so.momentum = 0.9;
  so.nesterov = true;
  so.weight_decay = 5e-4;
  so.no_decay_bn_bias = true;
  SGD oc(c.params, so), og(g.params, so);
  const StepSetup cpu_setup = setup_on(StepOptions{}, Device::cpu(), oc), gpu_setup = setup_on(StepOptions{}, gpu(), og);
  for (int step = 0; step < 3; ++step) {  // the first step initialises the momentum buffers
    SCOPED_TRACE("step " + std::to_string(step));
    Tensor x = rand_cpu({6, 16, 16, 3}, 200 + step), y = labels_for(6);
    const StepResult rc = step_on(c, oc, x, y, cpu_setup), rg = step_on(g, og, x, y, gpu_setup);
    EXPECT_TRUE(rc.stepped && rg.stepped);
    const double lc = rc.last_loss.item(), lg = rg.last_loss.item();
    EXPECT_NEAR(lg, lc, 1e-5 * std::fabs(lc));
    expect_grads_close(g, c, 1e-3);  // the step's gradients, which the optimizer leaves as they are
    expect_params_close(g, c, 1e-4);
  }
  // The optimizer state comes back on the CPU and loads onto the GPU.
  OptimizerState sc = oc.state_dict(), sg = og.state_dict();
  ASSERT_EQ(sc.tensors.size(), sg.tensors.size());
  for (auto& [k, t] : sg.tensors) {
    EXPECT_TRUE(t.device().is_cpu()) << k;
    kiln::testing::expect_close(t.to_double_vector(), sc.tensors.at(k).to_double_vector(), 1e-4, 1e-3, k);
  }
  og.load_state_dict(sc);
}

// The fp16 loss scaler's device mode, as `kiln train` runs an fp16 SGD step on a GPU: the unscale,
// the skip and the scale's update stay on the GPU, and the steps match the CPU's host-mode steps
// (non-finite batches skipped, the first one included), without and with clipping (decided on the
// device after the unscale; 0.1 is under these gradients' norm, so every finite step clips). Once
// SGD's momentum buffers exist (its first step taken reads the flag once), a whole step must not wait
// for the GPU at all.
TEST_F(TrainStepOnGpu, ResNetScalerVerdictOnTheGpuMatchesTheCpuAndNeverWaits) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  for (double clip : {0.0, 0.1}) {
    SCOPED_TRACE("clip_grad_norm " + std::to_string(clip));
    Replica c = make_replica(resnet_cfg(), Device::cpu()), g = make_replica(resnet_cfg(), gpu());
    SGDOptions so;
    so.lr = 0.05;
    so.momentum = 0.9;
    so.dampening = 0.1;  // the first step (buf = g) differs from the later ones
    so.weight_decay = 5e-4;
    SGD oc(c.params, so), og(g.params, so);
    StepOptions fp16;
    fp16.precision = "fp16";
    fp16.loss_scaler.growth_interval = 2;
    fp16.clip_grad_norm = clip;
    const StepSetup sc = setup_on(fp16, Device::cpu(), oc), sg = setup_on(fp16, gpu(), og);
    ASSERT_FALSE(sc.scaler_on_device) << sc.verdict_reason;
    ASSERT_TRUE(sg.scaler_on_device) << sg.verdict_reason;
    const std::vector<bool> bad = {true, false, false, true, false, false};
    for (size_t step = 0; step < bad.size(); ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      Tensor x = rand_cpu({6, 16, 16, 3}, 300 + step), y = labels_for(6);
      if (bad[step]) {
        std::vector<float> v = x.to_float_vector();
        v[7] = std::numeric_limits<float>::infinity();
        x = Tensor::from_vector(v, x.shape());
      }
      EXPECT_EQ(step_on(c, oc, x, y, sc).stepped, !bad[step]);
      Tensor xg = x.to(gpu()), yg = y.to(gpu());  // uploads from pageable memory wait: before the count
      const HostWaitStats before = host_wait_stats();
      EXPECT_TRUE(step_on(g, og, xg, yg, sg).verdict_on_device);
      if (step >= 2) {
        EXPECT_EQ(host_wait_stats().calls, before.calls) << "a device-mode step waited for the GPU";
      }
      EXPECT_EQ(sg.scaler->state_dict(), sc.scaler->state_dict());
      expect_params_close(g, c, 1e-4);
    }
    EXPECT_EQ(sg.scaler->skipped_steps(), 2);
  }
}

TEST_F(TrainStepOnGpu, LeNetAdamWClippingAndLossScalerMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  Replica c = make_replica(lenet_cfg(), Device::cpu()), g = make_replica(lenet_cfg(), gpu());
  AdamWOptions ao;
  ao.lr = 1e-2;
  ao.weight_decay = 0.05;
  ao.amsgrad = true;
  ao.eps = 1e-3;  // NOTE: with 1e-8, gradients near 0 that differ in sign between devices move by a full lr
  ao.no_decay_bn_bias = true;
  AdamW oc(c.params, ao), og(g.params, ao);
  // The clipping threshold: half the first batch's gradient norm, so that the first step clips.
  const Tensor x0 = rand_cpu({8, 28, 28, 1}, 300), y0 = labels_for(8);
  manual_seed(99);
  ops::cross_entropy(c.model->forward(x0), y0, 0.1).backward();
  const double first_norm = grad_norm(c.params);
  StepOptions o;
  o.precision = "fp16";
  o.clip_grad_norm = 0.5 * first_norm;
  const StepSetup sc = setup_on(o, Device::cpu(), oc), sg = setup_on(o, gpu(), og);
  EXPECT_FALSE(sg.scaler_on_device);  // AdamW reads the verdict on the host
  EXPECT_NE(sg.verdict_reason.find("adamw"), std::string::npos) << sg.verdict_reason;
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    Tensor x = rand_cpu({8, 28, 28, 1}, 300 + step), y = labels_for(8);
    const StepResult rc = step_on(c, oc, x, y, sc), rg = step_on(g, og, x, y, sg);
    EXPECT_TRUE(rc.stepped && rc.finite && rg.stepped && rg.finite);
    const double lc = rc.last_loss.item(), lg = rg.last_loss.item();
    EXPECT_NEAR(lg, lc, 1e-5 * std::fabs(lc));
    // The gradients as the step left them: unscaled, then clipped (the first step's to the threshold).
    expect_grads_close(g, c, 1e-3);
    const double nc = grad_norm(c.params), ng = grad_norm(g.params);
    EXPECT_NEAR(ng, nc, 1e-4 * first_norm);
    EXPECT_LE(nc, o.clip_grad_norm * (1 + 1e-4));
    if (step == 0) {
      EXPECT_NEAR(nc, o.clip_grad_norm, 1e-4 * o.clip_grad_norm);
    }
    EXPECT_NEAR(grad_norm(g.params, INFINITY), grad_norm(c.params, INFINITY), 1e-3 * first_norm);
    expect_params_close(g, c, 1e-3);
  }
  // A non-finite gradient is seen on the GPU too.
  Tensor bad = g.params[0].param.grad();
  bad.fill_(NAN);
  EXPECT_FALSE(sg.scaler->unscale_and_check(g.params));
}
