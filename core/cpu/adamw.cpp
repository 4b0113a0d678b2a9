// The AdamW step on the CPU (the kernel of core/optim_kernels.h's slot; the optimizer is
// optim/adamw.cpp): one pass over each parameter's contiguous f32 data. Scalars (bias corrections,
// step size) are computed in double as PyTorch does in Python, then used as f32; the per-element
// arithmetic follows PyTorch's operation order (addcmul: v + (c * g) * g; addcdiv: p + (s * m) / d).
// Tests: tests/optim/adamw_test.cpp, tests/optim/torch_reference_test.cpp.
#include <algorithm>
#include <cmath>

#include "core/optim_kernels.h"

namespace kiln::cpu {

namespace {

struct AdamWScalars {
  float b1, b2, c1, c2, eps, decay, neg_step_size, bc2_sqrt;
};

// One parameter's update; amsgrad is a template argument so each loop is branch-free and vectorizes.
template <bool kAmsgrad>
void adamw_update(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamWScalars& c) {
#pragma omp parallel for simd if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i] * c.decay;
    float mi = c.b1 * m[i] + c.c1 * g[i];
    float vi = c.b2 * v[i] + c.c2 * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    if constexpr (kAmsgrad) {
      vi = std::max(vmax[i], vi);
      vmax[i] = vi;
    }
    float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    p[i] = pi + c.neg_step_size * mi / denom;
  }
}

}  // namespace

void adamw_step(const std::vector<AdamWStepEntry>& entries, const AdamWStepOptions& o) {
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float c1 = static_cast<float>(1 - o.beta1), c2 = static_cast<float>(1 - o.beta2);
  const float eps = static_cast<float>(o.eps);
  for (const AdamWStepEntry& e : entries) {
    const double t = static_cast<double>(e.step);
    const float decay = static_cast<float>(1 - e.lr * e.weight_decay);
    const float neg_step_size = static_cast<float>(-(e.lr / (1 - std::pow(o.beta1, t))));
    const float bc2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(o.beta2, t)));
    AdamWScalars c{b1, b2, c1, c2, eps, decay, neg_step_size, bc2_sqrt};
    Tensor p = e.param, m = e.exp_avg, v = e.exp_avg_sq, vmax = e.max_exp_avg_sq;
    const float* g = e.grad.data<float>();
    if (vmax.defined())
      adamw_update<true>(p.data<float>(), g, m.data<float>(), v.data<float>(), vmax.data<float>(), e.grad.numel(), c);
    else
      adamw_update<false>(p.data<float>(), g, m.data<float>(), v.data<float>(), nullptr, e.grad.numel(), c);
  }
}

}  // namespace kiln::cpu
