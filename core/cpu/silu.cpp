// SiLU on the CPU (the kernels of core/ops/silu.h's slots; the op is core/ops/silu.cpp).
// Tests: tests/core/silu_test.cpp.
#include <cmath>

#include "core/ops/silu.h"
#include "core/ops/nn_util.h"

namespace kiln::cpu {

namespace {
// PyTorch's formulas: y = x / (1 + exp(-x)); dx = gy * s * (1 + x * (1 - s)), s = 1 / (1 + exp(-x)).
// exp overflows to inf for x < -88 (f32), which gives y = -0 and dx = 0; x = -inf gives NaN, as in PyTorch.
template <typename T>
T silu_of(T x) {
  return x / (T(1) + std::exp(-x));
}
template <typename T>
T silu_grad(T gy, T x) {
  const T s = T(1) / (T(1) + std::exp(-x));
  return gy * s * (T(1) + x * (T(1) - s));
}
}  // namespace

Tensor silu_forward(const Tensor& x) {
  namespace nn = ops::nn;
  const DType ct = nn::compute_dtype(x.dtype());
  Tensor xc = nn::to_compute(x, ct);
  Tensor y = Tensor::empty(x.shape(), ct);
  const int64_t n = x.numel();
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    const T* a = xc.data<T>();
    T* o = y.data<T>();
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) o[i] = silu_of(a[i]);
  });
  return nn::from_compute(y, x.dtype());
}

Tensor silu_backward(const Tensor& grad_out, const Tensor& x) {
  namespace nn = ops::nn;
  KILN_CHECK(grad_out.shape() == x.shape(), "silu: the gradient ", grad_out.str(), " and x ", x.str(),
             " differ in shape");
  const DType ct = nn::compute_dtype(grad_out.dtype() == DType::f64 || x.dtype() == DType::f64 ? DType::f64 : DType::f32);
  Tensor gc = nn::to_compute(grad_out, ct), xc = nn::to_compute(x, ct);
  Tensor dx = Tensor::empty(x.shape(), ct);
  const int64_t n = x.numel();
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    const T* g = gc.data<T>();
    const T* a = xc.data<T>();
    T* o = dx.data<T>();
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) o[i] = silu_grad(g[i], a[i]);
  });
  return nn::from_compute(dx, grad_out.dtype());
}

}  // namespace kiln::cpu
