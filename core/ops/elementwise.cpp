// Elementwise ops and their autograd, written once for every device: the checks here, the kernels
// from the device's kernel slots (elementwise.h; the CPU's in core/cpu/elementwise.cpp, CUDA's in
// core/cuda/elementwise_cuda.cu). The backward closures are written with these same public ops.
#include "core/ops/elementwise.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/reduce.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(binary);
KILN_DEFINE_KERNEL_SLOT(unary);
KILN_DEFINE_KERNEL_SLOT(affine);
KILN_DEFINE_KERNEL_SLOT(all_finite);
}  // namespace kiln

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

// Low precisions compute in f32 (the kernels' business); the checks every device shares.
void check_binary(const Tensor& a, const Tensor& b) {
  KILN_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), "elementwise arithmetic needs floating tensors, got ",
             dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  KILN_CHECK(a.dtype() == b.dtype(), "dtype mismatch: ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
}

Tensor binary(const char* name, ElementwiseBinary op, const Tensor& a, const Tensor& b) {
  check_binary(a, b);
  const Device d = op_device(name, {a, b});
  return binary_kernel.get(d, name)(op, a.detach(), b.detach());
}

void check_unary(const char* name, const Tensor& a) {
  KILN_CHECK(is_floating(a.dtype()), name, ": needs a floating tensor, got ", a.str());
}

Tensor unary(const char* name, ElementwiseUnary op, const Tensor& a) {
  check_unary(name, a);
  const Device d = op_device(name, {a});
  return unary_kernel.get(d, name)(op, a.detach());
}

// a * mul + add (add_scalar, mul_scalar).
Tensor affine(const char* name, const Tensor& a, double mul, double add) {
  check_unary(name, a);
  const Device d = op_device(name, {a});
  return affine_kernel.get(d, name)(a.detach(), mul, add);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary("add", ElementwiseBinary::add, a, b);
  Shape sa = a.shape(), sb = b.shape();
  return record("add", {a, b}, out, [sa, sb](const Tensor& g) { return grads{sum_to_shape(g, sa), sum_to_shape(g, sb)}; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary("sub", ElementwiseBinary::sub, a, b);
  Shape sa = a.shape(), sb = b.shape();
  return record("sub", {a, b}, out,
                [sa, sb](const Tensor& g) { return grads{sum_to_shape(g, sa), sum_to_shape(neg(g), sb)}; });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary("mul", ElementwiseBinary::mul, a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor ad = a.detach(), bd = b.detach();
  return record("mul", {a, b}, out, [ad, bd, ga, gb](const Tensor& g) {
    return grads{ga ? sum_to_shape(mul(g, bd), ad.shape()) : Tensor(), gb ? sum_to_shape(mul(g, ad), bd.shape()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary("div", ElementwiseBinary::div, a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor ad = a.detach(), bd = b.detach();
  return record("div", {a, b}, out, [ad, bd, ga, gb](const Tensor& g) {
    Tensor gda = ga ? sum_to_shape(div(g, bd), ad.shape()) : Tensor();
    Tensor gdb = gb ? sum_to_shape(neg(div(mul(g, ad), mul(bd, bd))), bd.shape()) : Tensor();
    return grads{gda, gdb};
  });
}

Tensor add_scalar(const Tensor& a, double s) {
  Tensor out = affine("add_scalar", a, 1.0, s);
  return record("add_scalar", {a}, out, [](const Tensor& g) { return grads{g}; });
}

Tensor mul_scalar(const Tensor& a, double s) {
  Tensor out = affine("mul_scalar", a, s, 0.0);
  return record("mul_scalar", {a}, out, [s](const Tensor& g) { return grads{mul_scalar(g, s)}; });
}

Tensor neg(const Tensor& a) { return mul_scalar(a, -1.0); }

Tensor relu(const Tensor& a) {
  // NaN stays NaN (PyTorch's relu), so a diverged activation reaches the loss check.
  Tensor out = unary("relu", ElementwiseUnary::relu, a);
  return record("relu", {a}, out, [od = out.detach()](const Tensor& g) { return grads{relu_backward(g, od)}; });
}

Tensor relu_backward(const Tensor& g, const Tensor& out) {
  // PyTorch's threshold_backward: a NaN output passes the gradient.
  return binary("relu_backward", ElementwiseBinary::relu_backward, g, out);
}

Tensor exp(const Tensor& a) {
  Tensor out = unary("exp", ElementwiseUnary::exp, a);
  return record("exp", {a}, out, [od = out.detach()](const Tensor& g) { return grads{mul(g, od)}; });
}

Tensor log(const Tensor& a) {
  Tensor out = unary("log", ElementwiseUnary::log, a);
  return record("log", {a}, out, [ad = a.detach()](const Tensor& g) { return grads{div(g, ad)}; });
}

Tensor sqrt(const Tensor& a) {
  Tensor out = unary("sqrt", ElementwiseUnary::sqrt, a);
  return record("sqrt", {a}, out, [od = out.detach()](const Tensor& g) { return grads{div(mul_scalar(g, 0.5), od)}; });
}

Tensor square(const Tensor& a) {
  Tensor out = unary("square", ElementwiseUnary::square, a);
  return record("square", {a}, out, [ad = a.detach()](const Tensor& g) { return grads{mul(g, mul_scalar(ad, 2.0))}; });
}

bool all_finite(const Tensor& a) {
  const Device d = op_device("all_finite", {a});
  return all_finite_kernel.get(d, "all_finite")(a.detach());
}

}  // namespace kiln::ops
