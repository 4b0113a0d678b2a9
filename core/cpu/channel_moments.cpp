// The backward kernel of core/ops/channel_moments.h on the CPU: dy = g_sum[c] + 2 * y * g_sumsq[c].
// Tests: tests/core/channel_moments_test.cpp.
#include "core/ops/channel_moments.h"
#include "core/ops/nn_util.h"

namespace kiln::cpu {

Tensor channel_moments_backward(const Tensor& y, const Tensor& g_sum, const Tensor& g_sumsq) {
  namespace nn = ops::nn;
  const int64_t c = y.shape().back(), rows = y.numel() / c;
  const DType ct = nn::compute_dtype(y.dtype());
  const Tensor yc = nn::to_compute(y.contiguous(), ct);
  const Tensor a = nn::to_compute(g_sum.contiguous(), ct), b = nn::to_compute(g_sumsq.contiguous(), ct);
  Tensor dy = Tensor::empty(y.shape(), ct);
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    const T* yp = yc.data<T>();
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* o = dy.data<T>();
#pragma omp parallel for schedule(static) if (rows * c > 32768)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < c; ++k) o[r * c + k] = ap[k] + T(2) * yp[r * c + k] * bp[k];
  });
  return nn::from_compute(dy, y.dtype());
}

}  // namespace kiln::cpu
