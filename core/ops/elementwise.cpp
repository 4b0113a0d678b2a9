// Elementwise ops and their autograd. CPU kernels here, layout-agnostic: broadcasting is done with
// stride-0 views, and the common cases (same shape, contiguous; bias over the last dim) get flat
// loops. CUDA tensors go to core/cuda/elementwise_cuda.cu (core/ops/dispatch.h), in the forward
// and in the backward closures alike (they are written with these same public ops).
#include "core/ops/elementwise.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops/bf16_rows.h"
#include "core/ops/dispatch.h"
#include "core/ops/reduce.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

namespace kiln::ops {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

// The ops with a kernel of their own; each maps to one CPU lambda and one CUDA kernel.
enum class Bin { add, sub, mul, div, relu_backward };
enum class Un { relu, exp, log, sqrt, square, affine };

#ifdef KILN_WITH_CUDA
Tensor binary_cuda(Bin op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case Bin::add: return cuda::binary(cuda::BinaryOp::add, a, b);
    case Bin::sub: return cuda::binary(cuda::BinaryOp::sub, a, b);
    case Bin::mul: return cuda::binary(cuda::BinaryOp::mul, a, b);
    case Bin::div: return cuda::binary(cuda::BinaryOp::div, a, b);
    case Bin::relu_backward: return cuda::relu_backward(a, b);
  }
  KILN_FAIL("elementwise: unknown binary op");
}
// mul/add: the affine map's constants (add_scalar, mul_scalar).
Tensor unary_cuda(Un op, const Tensor& a, double mul, double add) {
  switch (op) {
    case Un::relu: return cuda::unary(cuda::UnaryOp::relu, a);
    case Un::exp: return cuda::unary(cuda::UnaryOp::exp, a);
    case Un::log: return cuda::unary(cuda::UnaryOp::log, a);
    case Un::sqrt: return cuda::unary(cuda::UnaryOp::sqrt, a);
    case Un::square: return cuda::unary(cuda::UnaryOp::square, a);
    case Un::affine: return cuda::affine(a, mul, add);
  }
  KILN_FAIL("elementwise: unknown unary op");
}
#endif

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

// Low precisions compute in f32.
DType compute_dtype(DType a, DType b) {
  KILN_CHECK(is_floating(a) && is_floating(b), "elementwise arithmetic needs floating tensors, got ", dtype_name(a),
             " and ", dtype_name(b));
  KILN_CHECK(a == b, "dtype mismatch: ", dtype_name(a), " and ", dtype_name(b));
  return a == DType::f64 ? DType::f64 : DType::f32;
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
Tensor binary(const char* name, Bin op, const Tensor& a0, const Tensor& b0, F f) {
  DType ct = compute_dtype(a0.dtype(), b0.dtype());
  if (op_on_cuda(name, {a0, b0})) {
#ifdef KILN_WITH_CUDA
    return binary_cuda(op, a0.detach(), b0.detach());
#endif
  }
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
  Tensor a = a0.dtype() == ct ? a0 : a0.detach().to(ct);
  Tensor b = b0.dtype() == ct ? b0 : b0.detach().to(ct);
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, ct, a.device());
  if (ct == DType::f64) binary_loop<double>(out, a, b, f);
  else binary_loop<float>(out, a, b, f);
  return ct == a0.dtype() ? out : out.to(a0.dtype()).detach();
}

// mul/add: the constants of Un::affine (unused by the other ops).
template <typename F>
Tensor unary(const char* name, const Tensor& a0, Un op, F f, double mul = 1.0, double add = 0.0) {
  KILN_CHECK(is_floating(a0.dtype()), name, ": needs a floating tensor, got ", a0.str());
  if (op_on_cuda(name, {a0})) {
#ifdef KILN_WITH_CUDA
    return unary_cuda(op, a0.detach(), mul, add);
#endif
  }
  if (a0.dtype() == DType::bf16 && a0.is_contiguous()) {  // as in binary(): converted in the loop
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
  Tensor a = (a0.dtype() == ct ? a0.detach() : a0.detach().to(ct)).contiguous();
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

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary("add", Bin::add, a, b, [](auto x, auto y) { return x + y; });
  Shape sa = a.shape(), sb = b.shape();
  return record("add", {a, b}, out, [sa, sb](const Tensor& g) { return grads{sum_to_shape(g, sa), sum_to_shape(g, sb)}; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary("sub", Bin::sub, a, b, [](auto x, auto y) { return x - y; });
  Shape sa = a.shape(), sb = b.shape();
  return record("sub", {a, b}, out,
                [sa, sb](const Tensor& g) { return grads{sum_to_shape(g, sa), sum_to_shape(neg(g), sb)}; });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary("mul", Bin::mul, a, b, [](auto x, auto y) { return x * y; });
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor ad = a.detach(), bd = b.detach();
  return record("mul", {a, b}, out, [ad, bd, ga, gb](const Tensor& g) {
    return grads{ga ? sum_to_shape(mul(g, bd), ad.shape()) : Tensor(), gb ? sum_to_shape(mul(g, ad), bd.shape()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary("div", Bin::div, a, b, [](auto x, auto y) { return x / y; });
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor ad = a.detach(), bd = b.detach();
  return record("div", {a, b}, out, [ad, bd, ga, gb](const Tensor& g) {
    Tensor gda = ga ? sum_to_shape(div(g, bd), ad.shape()) : Tensor();
    Tensor gdb = gb ? sum_to_shape(neg(div(mul(g, ad), mul(bd, bd))), bd.shape()) : Tensor();
    return grads{gda, gdb};
  });
}

Tensor add_scalar(const Tensor& a, double s) {
  Tensor out = unary(
      "add_scalar", a, Un::affine, [s](auto x) { return static_cast<decltype(x)>(x + s); }, 1.0, s);
  return record("add_scalar", {a}, out, [](const Tensor& g) { return grads{g}; });
}

Tensor mul_scalar(const Tensor& a, double s) {
  Tensor out = unary(
      "mul_scalar", a, Un::affine, [s](auto x) { return static_cast<decltype(x)>(x * s); }, s, 0.0);
  return record("mul_scalar", {a}, out, [s](const Tensor& g) { return grads{mul_scalar(g, s)}; });
}

Tensor neg(const Tensor& a) { return mul_scalar(a, -1.0); }

Tensor relu(const Tensor& a) {
  // NaN stays NaN (PyTorch's relu), so a diverged activation reaches the loss check.
  Tensor out = unary("relu", a, Un::relu, [](auto x) { return (x > 0) | (x != x) ? x : decltype(x)(0); });
  return record("relu", {a}, out, [od = out.detach()](const Tensor& g) { return grads{relu_backward(g, od)}; });
}

Tensor relu_backward(const Tensor& g, const Tensor& out) {
  return binary("relu_backward", Bin::relu_backward, g, out, [](auto gy, auto y) {
    return y <= 0 ? decltype(gy)(0) : gy;  // PyTorch's threshold_backward: a NaN output passes the gradient
  });
}

Tensor exp(const Tensor& a) {
  Tensor out = unary("exp", a, Un::exp, [](auto x) { return std::exp(x); });
  return record("exp", {a}, out, [od = out.detach()](const Tensor& g) { return grads{mul(g, od)}; });
}

Tensor log(const Tensor& a) {
  Tensor out = unary("log", a, Un::log, [](auto x) { return std::log(x); });
  return record("log", {a}, out, [ad = a.detach()](const Tensor& g) { return grads{div(g, ad)}; });
}

Tensor sqrt(const Tensor& a) {
  Tensor out = unary("sqrt", a, Un::sqrt, [](auto x) { return std::sqrt(x); });
  return record("sqrt", {a}, out, [od = out.detach()](const Tensor& g) { return grads{div(mul_scalar(g, 0.5), od)}; });
}

Tensor square(const Tensor& a) {
  Tensor out = unary("square", a, Un::square, [](auto x) { return x * x; });
  return record("square", {a}, out, [ad = a.detach()](const Tensor& g) { return grads{mul(g, mul_scalar(ad, 2.0))}; });
}

bool all_finite(const Tensor& a0) {
  if (op_on_cuda("all_finite", {a0})) {
#ifdef KILN_WITH_CUDA
    return cuda::all_finite(a0.detach());
#endif
  }
  Tensor a = a0.detach().contiguous();
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

}  // namespace kiln::ops
