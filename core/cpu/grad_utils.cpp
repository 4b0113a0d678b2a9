// The gradient utilities on the CPU (kernel-table entries of core/kernels.h): scale-and-check (the
// loss scaler's unscale, clipping), sum of squares and max |x| (gradient norms), and the weight
// EMA's update. f32 tensors; reductions accumulate in double so a norm does not depend on the
// summation order's rounding. Tests: tests/optim/loss_scaler_test.cpp, tests/optim/clip_test.cpp,
// tests/optim/ema_test.cpp.
#include <cmath>
#include <limits>

#include "core/kernels.h"

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

void ema_update(const Tensor& ema, const Tensor& live, float decay) {
  const float one_minus_d = 1.0f - decay;
  float* a = ema.data<float>();
  const float* w = live.data<float>();
  const int64_t n = live.numel();
  for (int64_t i = 0; i < n; ++i) a[i] = decay * a[i] + one_minus_d * w[i];
}

}  // namespace kiln::cpu
