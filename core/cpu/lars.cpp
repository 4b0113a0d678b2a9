// The LARS step on the CPU (the kernel of core/optim_kernels.h's slot; the optimizer is
// optim/lars.cpp): per parameter, the norms of the weight and of the raw gradient (one pass, f64
// accumulators), the trust ratio from them, then one pass doing decay, momentum and the step.
// Tests: tests/optim/lars_test.cpp (against the formula in double), tests/gpu/lars_test.cpp.
#include <cmath>

#include "core/optim_kernels.h"

namespace kiln::cpu {

namespace {

// eta * ||p|| / (||g|| + wd * ||p|| + epsilon), or 1 when either norm is 0 (MLPerf's reference:
// a zero-initialised tensor, or one whose gradient vanished, takes the plain step).
double trust_ratio(const float* p, const float* g, int64_t n, double wd, const LarsStepOptions& o) {
  double pp = 0, gg = 0;
#pragma omp parallel for reduction(+ : pp, gg) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    pp += static_cast<double>(p[i]) * p[i];
    gg += static_cast<double>(g[i]) * g[i];
  }
  const double wn = std::sqrt(pp), gn = std::sqrt(gg);
  if (!(wn > 0) || !(gn > 0)) return 1.0;
  return o.eta * wn / (gn + wd * wn + o.epsilon);
}

template <bool kDecay, bool kNesterov>
void lars_update(float* p, const float* g, float* buf, int64_t n, float scaled_lr, float wd, float mom) {
#pragma omp parallel for simd if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (kDecay) d = d + wd * p[i];
    const float step = scaled_lr * d;
    const float b = mom * buf[i] + step;
    buf[i] = b;
    if constexpr (kNesterov) p[i] = p[i] - (mom * b + step);
    else p[i] = p[i] - b;
  }
}

}  // namespace

void lars_step(const std::vector<LarsStepEntry>& entries, const LarsStepOptions& o) {
  if (o.skip.defined()) {
    KILN_CHECK(o.skip.dtype() == DType::i32 && o.skip.numel() == 1, "lars_step: skip must be i32 [], got ", o.skip.str());
    if (o.skip.data<int32_t>()[0] != 0) return;
  }
  const float mom = static_cast<float>(o.momentum);
  for (const LarsStepEntry& e : entries) {
    KILN_CHECK(e.grad.dtype() == DType::f32 && e.momentum_buffer.defined() &&
                   e.momentum_buffer.shape() == e.param.shape(),
               "lars_step: parameter ", e.param.str(), " needs an f32 gradient and a momentum buffer of its shape");
    Tensor p = e.param;
    float* pd = p.data<float>();
    const float* gd = e.grad.data<float>();
    const int64_t n = e.grad.numel();
    const double trust = e.adapt ? trust_ratio(pd, gd, n, e.weight_decay, o) : 1.0;
    const float scaled_lr = static_cast<float>(e.lr * trust);
    const float wd = static_cast<float>(e.weight_decay);
    float* buf = e.momentum_buffer.data<float>();
    if (wd != 0.0f) {
      if (o.nesterov) lars_update<true, true>(pd, gd, buf, n, scaled_lr, wd, mom);
      else lars_update<true, false>(pd, gd, buf, n, scaled_lr, wd, mom);
    } else {
      if (o.nesterov) lars_update<false, true>(pd, gd, buf, n, scaled_lr, wd, mom);
      else lars_update<false, false>(pd, gd, buf, n, scaled_lr, wd, mom);
    }
  }
}

}  // namespace kiln::cpu
