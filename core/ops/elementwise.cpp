// CPU elementwise kernels and their autograd. Layout-agnostic: broadcasting is done with stride-0
// views, and the common cases (same shape, contiguous; bias over the last dim) get flat loops.
#include "core/ops/elementwise.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops/reduce.h"

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

void check_cpu(const char* op, const Tensor& t) {
  KILN_CHECK(t.device().is_cpu(), op, ": tensor ", t.str(), " is on ", t.device().str(),
             ", and this build has no CUDA kernel for it");
}

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

template <typename F>
Tensor binary(const char* name, const Tensor& a0, const Tensor& b0, F f) {
  check_cpu(name, a0);
  check_cpu(name, b0);
  DType ct = compute_dtype(a0.dtype(), b0.dtype());
  Tensor a = a0.dtype() == ct ? a0 : a0.detach().to(ct);
  Tensor b = b0.dtype() == ct ? b0 : b0.detach().to(ct);
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, ct, a.device());
  if (ct == DType::f64) binary_loop<double>(out, a, b, f);
  else binary_loop<float>(out, a, b, f);
  return ct == a0.dtype() ? out : out.to(a0.dtype()).detach();
}

template <typename F>
Tensor unary(const char* name, const Tensor& a0, F f) {
  check_cpu(name, a0);
  KILN_CHECK(is_floating(a0.dtype()), name, ": needs a floating tensor, got ", a0.str());
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
  Tensor out = binary("add", a, b, [](auto x, auto y) { return x + y; });
  Shape sa = a.shape(), sb = b.shape();
  return record("add", {a, b}, out, [sa, sb](const Tensor& g) { return grads{sum_to_shape(g, sa), sum_to_shape(g, sb)}; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary("sub", a, b, [](auto x, auto y) { return x - y; });
  Shape sa = a.shape(), sb = b.shape();
  return record("sub", {a, b}, out,
                [sa, sb](const Tensor& g) { return grads{sum_to_shape(g, sa), sum_to_shape(neg(g), sb)}; });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary("mul", a, b, [](auto x, auto y) { return x * y; });
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor ad = a.detach(), bd = b.detach();
  return record("mul", {a, b}, out, [ad, bd, ga, gb](const Tensor& g) {
    return grads{ga ? sum_to_shape(mul(g, bd), ad.shape()) : Tensor(), gb ? sum_to_shape(mul(g, ad), bd.shape()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary("div", a, b, [](auto x, auto y) { return x / y; });
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor ad = a.detach(), bd = b.detach();
  return record("div", {a, b}, out, [ad, bd, ga, gb](const Tensor& g) {
    Tensor gda = ga ? sum_to_shape(div(g, bd), ad.shape()) : Tensor();
    Tensor gdb = gb ? sum_to_shape(neg(div(mul(g, ad), mul(bd, bd))), bd.shape()) : Tensor();
    return grads{gda, gdb};
  });
}

Tensor add_scalar(const Tensor& a, double s) {
  Tensor out = unary("add_scalar", a, [s](auto x) { return static_cast<decltype(x)>(x + s); });
  return record("add_scalar", {a}, out, [](const Tensor& g) { return grads{g}; });
}

Tensor mul_scalar(const Tensor& a, double s) {
  Tensor out = unary("mul_scalar", a, [s](auto x) { return static_cast<decltype(x)>(x * s); });
  return record("mul_scalar", {a}, out, [s](const Tensor& g) { return grads{mul_scalar(g, s)}; });
}

Tensor neg(const Tensor& a) { return mul_scalar(a, -1.0); }

Tensor relu(const Tensor& a) {
  Tensor out = unary("relu", a, [](auto x) { return x > 0 ? x : decltype(x)(0); });
  return record("relu", {a}, out, [od = out.detach()](const Tensor& g) { return grads{relu_backward(g, od)}; });
}

Tensor relu_backward(const Tensor& g, const Tensor& out) {
  return binary("relu_backward", g, out, [](auto gy, auto y) { return y > 0 ? gy : decltype(gy)(0); });
}

Tensor exp(const Tensor& a) {
  Tensor out = unary("exp", a, [](auto x) { return std::exp(x); });
  return record("exp", {a}, out, [od = out.detach()](const Tensor& g) { return grads{mul(g, od)}; });
}

Tensor log(const Tensor& a) {
  Tensor out = unary("log", a, [](auto x) { return std::log(x); });
  return record("log", {a}, out, [ad = a.detach()](const Tensor& g) { return grads{div(g, ad)}; });
}

Tensor sqrt(const Tensor& a) {
  Tensor out = unary("sqrt", a, [](auto x) { return std::sqrt(x); });
  return record("sqrt", {a}, out, [od = out.detach()](const Tensor& g) { return grads{div(mul_scalar(g, 0.5), od)}; });
}

Tensor square(const Tensor& a) {
  Tensor out = unary("square", a, [](auto x) { return x * x; });
  return record("square", {a}, out, [ad = a.detach()](const Tensor& g) { return grads{mul(g, mul_scalar(ad, 2.0))}; });
}

bool all_finite(const Tensor& a0) {
  check_cpu("all_finite", a0);
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
