// The SGD step on the CPU (the kernel of core/optim_kernels.h's slot; the optimizer is optim/sgd.cpp):
// one pass over each parameter's contiguous f32 data doing decay, momentum and the step together.
// Arithmetic is f32 in PyTorch's order (each multiply rounded, then the add), so results match
// torch.optim.SGD to the last bit or two (PyTorch may fuse a multiply-add).
// Tests: tests/optim/sgd_test.cpp, tests/optim/torch_reference_test.cpp.
#include "core/optim_kernels.h"

namespace kiln::cpu {

namespace {

// One parameter's update. The options are template arguments so that each instantiation is a
// branch-free loop that vectorizes. NOTE: no decay term at all when weight decay is 0, as in
// PyTorch: 0 * inf would be NaN.
template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_update(float* p, const float* g, float* buf, int64_t n, float lr, float wd, float mom, float damp) {
#pragma omp parallel for simd if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (kDecay) d = d + wd * p[i];
    if constexpr (kMomentum) {
      float b;
      if constexpr (kFirst) b = d;
      else b = mom * buf[i] + damp * d;
      buf[i] = b;
      if constexpr (kNesterov) d = d + mom * b;
      else d = b;
    }
    p[i] = p[i] - lr * d;
  }
}

using SGDKernel = void (*)(float*, const float*, float*, int64_t, float, float, float, float);

template <bool kDecay>
SGDKernel pick(bool momentum, bool first, bool nesterov) {
  if (!momentum) return sgd_update<kDecay, false, false, false>;
  if (first) return nesterov ? sgd_update<kDecay, true, true, true> : sgd_update<kDecay, true, true, false>;
  return nesterov ? sgd_update<kDecay, true, false, true> : sgd_update<kDecay, true, false, false>;
}

}  // namespace

void sgd_step(const std::vector<SgdStepEntry>& entries, const SgdStepOptions& o) {
  if (o.skip.defined()) {
    KILN_CHECK(o.skip.dtype() == DType::i32 && o.skip.numel() == 1, "sgd_step: skip must be i32 [], got ", o.skip.str());
    if (o.skip.data<int32_t>()[0] != 0) return;
  }
  const float mom = static_cast<float>(o.momentum);
  const float damp = static_cast<float>(1.0 - o.dampening);
  const bool momentum = o.momentum != 0;
  for (const SgdStepEntry& e : entries) {
    const float lr = static_cast<float>(e.lr);
    const float wd = static_cast<float>(e.weight_decay);
    float* buf = momentum ? e.momentum_buffer.data<float>() : nullptr;
    SGDKernel kernel = wd != 0.0f ? pick<true>(momentum, e.first_step, o.nesterov)
                                  : pick<false>(momentum, e.first_step, o.nesterov);
    Tensor p = e.param;
    kernel(p.data<float>(), e.grad.data<float>(), buf, e.grad.numel(), lr, wd, mom, damp);
  }
}

}  // namespace kiln::cpu
