// The gradient utilities on the CPU (the kernels of core/optim_kernels.h's slots): scale-and-check (the
// loss scaler's unscale, clipping), sum of squares and max |x| (gradient norms), and the weight
// EMA's update, and the loss scaler's unscale and update when it keeps its state in tensors
// (core/loss_scale_rule.h). f32 tensors; reductions accumulate in double so a norm does not depend on the
// summation order's rounding. Tests: tests/optim/loss_scaler_test.cpp, tests/optim/clip_test.cpp,
// tests/optim/ema_test.cpp.
#include <cmath>
#include <limits>

#include "core/optim_kernels.h"

namespace kiln::cpu {

bool scale_and_check_finite(const std::vector<Tensor>& xs, double factor) {
  const float f = static_cast<float>(factor);
  bool finite = true;
  for (const Tensor& x : xs) {
    float* g = x.data<float>();
    const int64_t n = x.numel();
    int64_t bad = 0;  // a count, not a flag: a branch-free reduction that vectorizes
#pragma omp parallel for simd reduction(+ : bad) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      float v = g[i] * f;
      g[i] = v;
      bad += std::isfinite(v) ? 0 : 1;
    }
    finite = finite && bad == 0;
  }
  return finite;
}

void loss_scale_unscale(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf) {
  check_loss_scale_state("loss_scale_unscale", state, found_inf);
  // float(1 / scale), as LossScaler::unscale_and_check passes it (the value scale_and_check_finite rounds to).
  const float inv = static_cast<float>(1.0 / state.data<double>()[kScale]);
  if (!scale_and_check_finite(grads, inv)) found_inf.data<int32_t>()[0] = 1;
}

void loss_scale_update(const Tensor& state, const Tensor& scale32, const Tensor& found_inf, const LossScaleRule& rule) {
  check_loss_scale_state("loss_scale_update", state, found_inf);
  KILN_CHECK(scale32.dtype() == DType::f32 && scale32.numel() == 1, "loss_scale_update: scale32 must be f32 [], got ",
             scale32.str());
  double* s = state.data<double>();
  int32_t* flag = found_inf.data<int32_t>();
  apply_loss_scale_rule(s, *flag != 0, rule);
  scale32.data<float>()[0] = static_cast<float>(s[kScale]);
  *flag = 0;
}

double sum_of_squares(const std::vector<Tensor>& xs) {
  double acc = 0;
  for (const Tensor& x : xs) {
    const float* d = x.data<float>();
    const int64_t n = x.numel();
    double s = 0;
#pragma omp parallel for simd reduction(+ : s) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(d[i]) * d[i];
    acc += s;
  }
  return acc;
}

double max_abs(const Tensor& x) {
  const float* d = x.data<float>();
  const int64_t n = x.numel();
  float m = 0;
  int64_t nan = 0;
#pragma omp parallel for simd reduction(max : m) reduction(+ : nan) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    float a = std::fabs(d[i]);
    m = a > m ? a : m;
    nan += a != a;
  }
  return nan ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(m);
}

namespace {
// The CPU reads the flag where it is (reads are free here).
bool skipped(const Tensor& skip) {
  if (!skip.defined()) return false;
  KILN_CHECK(skip.dtype() == DType::f64 && skip.numel() == 1, "EMA: the skip flag must be an f64 [1], got ", skip.str());
  return skip.contiguous().data<double>()[0] > 0;
}
}  // namespace

void ema_copy(const Tensor& dst, const Tensor& src, const Tensor& skip) {
  if (!skipped(skip)) copy_tensor(dst, src);
}

void ema_update(const Tensor& ema, const Tensor& live, float decay, const Tensor& skip) {
  if (skipped(skip)) return;
  const float one_minus_d = 1.0f - decay;
  float* a = ema.data<float>();
  const float* w = live.data<float>();
  const int64_t n = live.numel();
  for (int64_t i = 0; i < n; ++i) a[i] = decay * a[i] + one_minus_d * w[i];
}

}  // namespace kiln::cpu
