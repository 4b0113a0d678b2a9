// Elementwise kernels on the CPU (the kernels of core/ops/elementwise.h's slots; the ops, their checks and
// autograd are core/ops/elementwise.cpp). Layout-agnostic: broadcasting is done with stride-0
// views, and the common cases (same shape, contiguous; bias over the last dim) get flat loops;
// bf16 operands of one shape are converted block by block in cache. f16/bf16 compute in f32.
// Tests: tests/core/autograd_test.cpp (values, broadcasting and gradients), tests/core/nan_test.cpp.
#include <algorithm>
#include <cmath>

#include "core/ops/bf16_rows.h"
#include "core/ops/elementwise.h"

namespace kiln::cpu {

namespace {

using ops::bf16_to_f32;
using ops::f32_to_bf16;

// Strides of `t` broadcast to `shape` (0 on broadcast dims).
Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  size_t n = shape.size(), k = t.shape().size();
  Shape st(n, 0);
  for (size_t i = 0; i < k; ++i) {
    size_t o = n - k + i;
    st[o] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  }
  return st;
}

template <typename T, typename F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const Shape& shape = out.shape();
  int64_t n = out.numel();
  T* o = out.data<T>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  if (a.shape() == shape && b.shape() == shape && a.is_contiguous() && b.is_contiguous()) {
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; ++i) o[i] = f(pa[i], pb[i]);
    return;
  }
  Shape sa = broadcast_strides(a, shape), sb = broadcast_strides(b, shape);
  int64_t nd = static_cast<int64_t>(shape.size());
  if (nd == 0) {
    o[0] = f(pa[0], pb[0]);
    return;
  }
  int64_t inner = shape[nd - 1];
  int64_t outer = inner ? n / inner : 0;
  int64_t ia = sa[nd - 1], ib = sb[nd - 1];
#pragma omp parallel for if (n > 32768)
  for (int64_t r = 0; r < outer; ++r) {
    int64_t rem = r, oa = 0, ob = 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      int64_t idx = rem % shape[d];
      rem /= shape[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    T* orow = o + r * inner;
    if (ia == 1 && ib == 1) {
      for (int64_t i = 0; i < inner; ++i) orow[i] = f(pa[oa + i], pb[ob + i]);
    } else {
      for (int64_t i = 0; i < inner; ++i) orow[i] = f(pa[oa + i * ia], pb[ob + i * ib]);
    }
  }
}

// Elements per block of the bf16 paths (two f32 blocks on the stack: 16 KiB).
constexpr int64_t kBf16Block = 2048;

template <typename F>
Tensor binary_impl(const Tensor& a0, const Tensor& b0, F f) {
  const DType ct = a0.dtype() == DType::f64 ? DType::f64 : DType::f32;
  if (a0.dtype() == DType::bf16 && a0.shape() == b0.shape() && a0.is_contiguous() && b0.is_contiguous()) {
    // Mixed precision's activations and their gradients: converted block by block, in cache
    // (the same f32 arithmetic and rounding as converting the tensors, without the temporaries).
    Tensor out = Tensor::empty(a0.shape(), DType::bf16, a0.device());
    const uint16_t* pa = static_cast<const uint16_t*>(a0.raw_data());
    const uint16_t* pb = static_cast<const uint16_t*>(b0.raw_data());
    uint16_t* o = static_cast<uint16_t*>(out.raw_data());
    const int64_t n = out.numel(), blocks = (n + kBf16Block - 1) / kBf16Block;
#pragma omp parallel for if (n > 32768)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t i0 = blk * kBf16Block, len = std::min(kBf16Block, n - i0);
      float fa[kBf16Block], fb[kBf16Block];
      bf16_to_f32(pa + i0, fa, len);
      bf16_to_f32(pb + i0, fb, len);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) fa[i] = f(fa[i], fb[i]);
      f32_to_bf16(fa, o + i0, len);
    }
    return out;
  }
  Tensor a = a0.dtype() == ct ? a0 : a0.to(ct);
  Tensor b = b0.dtype() == ct ? b0 : b0.to(ct);
  Shape shape = ops::broadcast_shapes(a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, ct, a.device());
  if (ct == DType::f64) binary_loop<double>(out, a, b, f);
  else binary_loop<float>(out, a, b, f);
  return ct == a0.dtype() ? out : out.to(a0.dtype()).detach();
}

template <typename F>
Tensor unary_impl(const Tensor& a0, F f) {
  if (a0.dtype() == DType::bf16 && a0.is_contiguous()) {  // as in binary_impl(): converted in the loop
    Tensor out = Tensor::empty(a0.shape(), DType::bf16, a0.device());
    const uint16_t* p = static_cast<const uint16_t*>(a0.raw_data());
    uint16_t* o = static_cast<uint16_t*>(out.raw_data());
    const int64_t n = out.numel(), blocks = (n + kBf16Block - 1) / kBf16Block;
#pragma omp parallel for if (n > 32768)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t i0 = blk * kBf16Block, len = std::min(kBf16Block, n - i0);
      float fa[kBf16Block];
      bf16_to_f32(p + i0, fa, len);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) fa[i] = static_cast<float>(f(fa[i]));
      f32_to_bf16(fa, o + i0, len);
    }
    return out;
  }
  DType ct = a0.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor a = (a0.dtype() == ct ? a0 : a0.to(ct)).contiguous();
  Tensor out = Tensor::empty(a.shape(), ct, a.device());
  int64_t n = a.numel();
  if (ct == DType::f64) {
    const double* p = a.data<double>();
    double* o = out.data<double>();
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; ++i) o[i] = f(p[i]);
  } else {
    const float* p = a.data<float>();
    float* o = out.data<float>();
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; ++i) o[i] = f(p[i]);
  }
  return ct == a0.dtype() ? out : out.to(a0.dtype()).detach();
}

}  // namespace

Tensor binary(ElementwiseBinary op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case ElementwiseBinary::add: return binary_impl(a, b, [](auto x, auto y) { return x + y; });
    case ElementwiseBinary::sub: return binary_impl(a, b, [](auto x, auto y) { return x - y; });
    case ElementwiseBinary::mul: return binary_impl(a, b, [](auto x, auto y) { return x * y; });
    case ElementwiseBinary::div: return binary_impl(a, b, [](auto x, auto y) { return x / y; });
    case ElementwiseBinary::relu_backward:
      return binary_impl(a, b, [](auto gy, auto y) {
        return y <= 0 ? decltype(gy)(0) : gy;  // PyTorch's threshold_backward: a NaN output passes the gradient
      });
  }
  KILN_FAIL("elementwise: unknown binary op");
}

Tensor unary(ElementwiseUnary op, const Tensor& a) {
  switch (op) {
    // NaN stays NaN (PyTorch's relu), so a diverged activation reaches the loss check.
    case ElementwiseUnary::relu: return unary_impl(a, [](auto x) { return ((x > 0) | (x != x)) ? x : decltype(x)(0); });
    case ElementwiseUnary::exp: return unary_impl(a, [](auto x) { return std::exp(x); });
    case ElementwiseUnary::log: return unary_impl(a, [](auto x) { return std::log(x); });
    case ElementwiseUnary::sqrt: return unary_impl(a, [](auto x) { return std::sqrt(x); });
    case ElementwiseUnary::square: return unary_impl(a, [](auto x) { return x * x; });
  }
  KILN_FAIL("elementwise: unknown unary op");
}

Tensor affine(const Tensor& a, double mul, double add) {
  // In f64, rounded once; the unused term of mul_scalar (add = 0) and add_scalar (mul = 1) is left
  // out, so neg(0) = -0 as in plain arithmetic.
  if (add == 0.0) return unary_impl(a, [mul](auto x) { return static_cast<decltype(x)>(x * mul); });
  if (mul == 1.0) return unary_impl(a, [add](auto x) { return static_cast<decltype(x)>(x + add); });
  return unary_impl(a, [mul, add](auto x) { return static_cast<decltype(x)>(x * mul + add); });
}

bool all_finite(const Tensor& a0) {
  Tensor a = a0.contiguous();
  int64_t n = a.numel();
  bool ok = true;
  if (a.dtype() == DType::f32) {
    const float* p = a.data<float>();
#pragma omp parallel for reduction(&& : ok) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) ok = ok && std::isfinite(p[i]);
    return ok;
  }
  for (double v : a.to_double_vector()) if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace kiln::cpu
