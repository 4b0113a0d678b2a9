// Local response normalisation across channels on the CPU, channel = last dim (NHWC): each pixel is
// a row of C channels, processed independently (OpenMP over rows, vectorised over channels).
//   D_c = k + alpha/size * sum_{c' = c - size/2}^{c + (size-1)/2} x_{c'}^2      (zero outside [0, C))
//   y_c = x_c * D_c^-beta
//   dx_j = dy_j * D_j^-beta - 2*alpha*beta/size * x_j * sum_{c = j - (size-1)/2}^{j + size/2} dy_c x_c D_c^(-beta-1)
// (the backward window is the forward one mirrored: c's window holds j iff j's mirrored window holds c).
// Backward recomputes D from the saved x instead of keeping a second activation-sized tensor.
// The kernels of core/ops/lrn.h's slots; the op is core/ops/lrn.cpp. Tests: tests/core/lrn_test.cpp.
#include <cmath>
#include <vector>

#include "core/ops/lrn.h"
#include "core/ops/nn_util.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kParallelMin = 16384;

struct LrnParams {
  int64_t size;
  double alpha, beta, k;
};

// p[c] = d[c]^-beta; AlexNet's beta = 0.75 (and 0.5) take sqrt instead of pow, which vectorises.
template <typename T>
void pow_neg_beta(const T* d, T* p, int64_t C, double beta) {
  if (beta == 0.75) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) p[c] = T(1) / std::sqrt(d[c] * std::sqrt(d[c]));
  } else if (beta == 0.5) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) p[c] = T(1) / std::sqrt(d[c]);
  } else {
    for (int64_t c = 0; c < C; ++c) p[c] = std::pow(d[c], static_cast<T>(-beta));
  }
}

// d[c] = k + alpha/size * sum of sq over the forward window of c. `pad` holds C + size - 1 values,
// the squares at offset size/2 and zeros around them.
template <typename T>
void window_denominator(const T* x, const LrnParams& lp, int64_t C, T* pad, T* d) {
  const int64_t lo = lp.size / 2;
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) pad[lo + c] = x[c] * x[c];
  const T k = static_cast<T>(lp.k), a = static_cast<T>(lp.alpha / lp.size);
  for (int64_t c = 0; c < C; ++c) d[c] = T(0);
  for (int64_t j = 0; j < lp.size; ++j)
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) d[c] += pad[c + j];
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) d[c] = k + a * d[c];
}

template <typename T>
void forward_rows(const T* x, int64_t rows, int64_t C, const LrnParams& lp, T* y) {
#pragma omp parallel if (rows * C > kParallelMin)
  {
    std::vector<T> pad(C + lp.size - 1, T(0)), d(C), p(C);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * C;
      T* yr = y + r * C;
      window_denominator(xr, lp, C, pad.data(), d.data());
      pow_neg_beta(d.data(), p.data(), C, lp.beta);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * p[c];
    }
  }
}

template <typename T>
void backward_rows(const T* x, const T* gy, int64_t rows, int64_t C, const LrnParams& lp, T* dx) {
  const int64_t lo_b = (lp.size - 1) / 2;  // the mirrored window starts (size-1)/2 before j
  const T coef = static_cast<T>(2.0 * lp.alpha * lp.beta / lp.size);
#pragma omp parallel if (rows * C > kParallelMin)
  {
    std::vector<T> pad(C + lp.size - 1, T(0)), d(C), p(C), tpad(C + lp.size - 1, T(0));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * C;
      const T* gr = gy + r * C;
      T* dr = dx + r * C;
      window_denominator(xr, lp, C, pad.data(), d.data());
      pow_neg_beta(d.data(), p.data(), C, lp.beta);
      T* t = tpad.data() + lo_b;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) t[c] = gr[c] * xr[c] * p[c] / d[c];
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dr[c] = gr[c] * p[c];
      for (int64_t j = 0; j < lp.size; ++j) {
        const T* tj = tpad.data() + j;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dr[c] -= coef * xr[c] * tj[c];
      }
    }
  }
}

}  // namespace

Tensor lrn_forward(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  namespace nn = ops::nn;
  LrnParams lp{size, alpha, beta, k};
  int64_t C = x.size(-1), rows = C ? x.numel() / C : 0;
  DType ct = nn::compute_dtype(x.dtype());
  Tensor xc = nn::to_compute(x, ct);
  Tensor y = Tensor::empty(x.shape(), ct);
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    forward_rows<T>(xc.data<T>(), rows, C, lp, y.data<T>());
  });
  return nn::from_compute(y, x.dtype());
}

Tensor lrn_backward(const Tensor& gy, const Tensor& x, int64_t size, double alpha, double beta, double k) {
  namespace nn = ops::nn;
  LrnParams lp{size, alpha, beta, k};
  int64_t C = x.size(-1), rows = C ? x.numel() / C : 0;
  DType ct = nn::compute_dtype(x.dtype());
  Tensor xc = nn::to_compute(x, ct), gc = nn::to_compute(gy, ct);
  Tensor dx = Tensor::empty(x.shape(), ct);
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    backward_rows<T>(xc.data<T>(), gc.data<T>(), rows, C, lp, dx.data<T>());
  });
  return nn::from_compute(dx, x.dtype());
}

}  // namespace kiln::cpu
