// LARS on the GPU against LARS on the CPU (which tests/optim/lars_test.cpp checks against the
// formula): the same parameters and gradients, several steps with a changing lr, tensors of 1, odd
// and > 16K elements (several chunks of the multi-tensor kernel), a bf16 gradient, the bias/bn
// exclusion, Nesterov; a step skipped by a flag on the device; and no host wait in a step (the norms
// and trust ratios stay on the GPU).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/host_wait.h"
#include "optim/lars.h"
#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

struct Spec {
  const char* name;
  Shape shape;
};
// conv weight (several chunks), its bias, a batch norm, a linear layer with an odd size, a scalar-like tensor.
const Spec kSpecs[] = {{"conv.weight", {64, 32, 3, 3}}, {"conv.bias", {64}},      {"bn.weight", {37}},
                       {"bn.bias", {37}},               {"fc.weight", {37, 3}}, {"head.weight", {1, 1}}};

std::vector<ParamRef> params_on(Device d) {
  std::vector<ParamRef> out;
  uint64_t seed = 70;
  for (const Spec& s : kSpecs) {
    Tensor t = rand_cpu(s.shape, seed++, DType::f32, 0.1);
    if (!d.is_cpu()) t = t.to(d);
    t.set_requires_grad(true);
    out.push_back({s.name, t});
  }
  return out;
}

// The gradient of tensor k at `step`; tensor 0's is bf16 on the GPU (rounded to bf16 for both).
Tensor grad_for(size_t k, int step) {
  DType dt = k == 0 ? DType::bf16 : DType::f32;
  return rand_cpu(kSpecs[k].shape, 1000 + 10 * step + k, dt, 0.01 * (k + 1));
}

void set_grads(std::vector<ParamRef>& cpu, std::vector<ParamRef>& dev, int step) {
  for (size_t k = 0; k < cpu.size(); ++k) {
    Tensor g = grad_for(k, step);
    Tensor c = cpu[k].param, d = dev[k].param;
    c.set_grad(g.to(DType::f32));
    d.set_grad(g.to(gpu()));
  }
}

}  // namespace

TEST(CudaLars, MatchesTheCpuStep) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "momentum");
    LARSOptions o;
    o.lr = 5.0;
    o.momentum = 0.9;
    o.weight_decay = 5e-4;
    o.eta = 0.01;
    o.nesterov = nesterov;
    auto pc = params_on(Device::cpu()), pg = params_on(gpu());
    LARS oc(pc, o), og(pg, o);
    for (int step = 0; step < 4; ++step) {
      const double lr = o.lr * (1.0 - 0.2 * step);
      oc.set_lr(lr);
      og.set_lr(lr);
      set_grads(pc, pg, step);
      oc.step();
      og.step();
    }
    OptimizerState sc = oc.state_dict(), sg = og.state_dict();
    for (size_t k = 0; k < pc.size(); ++k) {
      const std::string name = pc[k].name;
      gputest::expect_near_all(pg[k].param, pc[k].param.to_double_vector(), 1e-5, 1e-5, name);
      const std::string key = name + ".momentum_buffer";
      EXPECT_TRUE(sg.tensors.at(key).device().is_cpu()) << key;
      kiln::testing::expect_close(sg.tensors.at(key).to_double_vector(), sc.tensors.at(key).to_double_vector(), 1e-6, 1e-4, key);
    }
    og.load_state_dict(sc);  // the CPU's state loads onto the GPU
  }
}

TEST(CudaLars, SkipFlagOnTheDeviceAndNoHostWait) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  LARSOptions o;
  o.lr = 2.0;
  o.weight_decay = 1e-4;
  auto pc = params_on(Device::cpu()), pg = params_on(gpu());
  LARS oc(pc, o), og(pg, o);
  ASSERT_TRUE(og.can_skip_on_device());
  const Tensor skip = Tensor::from_vector(std::vector<int64_t>{1}, {}, DType::i32).to(gpu());
  const Tensor go = Tensor::from_vector(std::vector<int64_t>{0}, {}, DType::i32).to(gpu());
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    set_grads(pc, pg, step);  // uploads from pageable memory wait: before the count
    const bool skipped = step == 1;
    const HostWaitStats before = host_wait_stats();
    og.step_unless(skipped ? skip : go);
    EXPECT_EQ(host_wait_stats().calls, before.calls) << "a LARS step waited for the GPU";
    if (!skipped) oc.step();
    for (size_t k = 0; k < pc.size(); ++k)
      gputest::expect_near_all(pg[k].param, pc[k].param.to_double_vector(), 1e-5, 1e-5, pc[k].name);
  }
}

TEST(CudaLars, BadEntriesThrow) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  cuda::LarsEntry e;
  e.param = Tensor::zeros({4}, DType::f32, gpu());
  e.grad = Tensor::zeros({4}, DType::f32, gpu());
  EXPECT_THROW(cuda::lars_step({e}, {}), Error);  // no momentum buffer
  e.momentum_buffer = Tensor::zeros({5}, DType::f32, gpu());
  EXPECT_THROW(cuda::lars_step({e}, {}), Error);  // buffer of another shape
  e.momentum_buffer = Tensor::zeros({4}, DType::f32, gpu());
  cuda::LarsOptions bad;
  bad.eta = 0;
  EXPECT_THROW(cuda::lars_step({e}, bad), Error);
}

#endif  // KILN_WITH_CUDA
