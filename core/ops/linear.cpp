// matmul and linear: the ops (checks, one backward closure each); the product itself is the device's
// kernel slot `matmul_kernel` (linear.h: oneDNN in core/cpu/linear.cpp, cuBLASLt in
// core/cuda/matmul_cuda.cu), which takes the transposes as flags, so no operand is copied:
//
//   matmul: y = a b            da = gy b^T      db = a^T gy
//   linear: y = x w^T + bias   dx = gy w        dw = gy^T x      dbias = sum over rows of gy
//
// Tests: tests/core/linear_test.cpp, tests/gpu/ops_dispatch_test.cpp. Benchmark: `kiln bench matmul`,
// tools/bench/bench_ops.py.
#include "core/ops/linear.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/reduce.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(matmul);
}  // namespace kiln

namespace kiln::ops {

namespace {

void check_operand(const char* op, const char* name, const Tensor& t) {
  KILN_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
  KILN_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16, op, ": ", name, " ",
             t.str(), ": accepted dtypes are f32, bf16 and f16");
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operand("matmul", "a", a);
  check_operand("matmul", "b", b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "matmul: a ", a.str(), " and b ", b.str(), " must both be 2-D");
  KILN_CHECK(a.size(1) == b.size(0), "matmul: a ", a.str(), " @ b ", b.str(), ": inner dimensions differ (", a.size(1),
             " vs ", b.size(0), ")");
  KILN_CHECK(a.dtype() == b.dtype(), "matmul: a ", a.str(), " and b ", b.str(), " must have the same dtype");
  const Device d = op_device("matmul", {a, b});
  const auto mm = matmul_kernel.get(d, "matmul");
  DType dt = a.dtype();
  Tensor ad = a.detach(), bd = b.detach();
  Tensor y = mm(ad, bd, false, false, Tensor());
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record("matmul", {a, b}, y, [mm, ad, bd, ga, gb, dt](const Tensor& gy0) {
    Tensor gy = gy0.dtype() == dt ? gy0 : gy0.to(dt);
    return grads{ga ? mm(gy, bd, false, true, Tensor()) : Tensor(), gb ? mm(ad, gy, true, false, Tensor()) : Tensor()};
  });
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_operand("linear", "x", x);
  check_operand("linear", "weight", w);
  KILN_CHECK(x.dim() == 2, "linear: input x ", x.str(), " must be 2-D (N, in)");
  KILN_CHECK(w.dim() == 2, "linear: weight ", w.str(), " must be 2-D (out, in)");
  KILN_CHECK(x.size(1) == w.size(1), "linear: input x ", x.str(), " has ", x.size(1), " features but weight ", w.str(),
             " expects ", w.size(1));
  KILN_CHECK(x.dtype() == w.dtype(), "linear: input x ", x.str(), " and weight ", w.str(), " must have the same dtype");
  if (b.defined()) {
    check_operand("linear", "bias", b);
    KILN_CHECK(b.shape() == Shape{w.size(0)}, "linear: bias ", b.str(), " must have shape [", w.size(0),
               "] for weight ", w.str());
    KILN_CHECK(b.dtype() == x.dtype(), "linear: bias ", b.str(), " and input x ", x.str(), " must have the same dtype");
  }
  const Device d = op_device("linear", {x, w, b});
  const auto mm = matmul_kernel.get(d, "linear");
  DType dt = x.dtype();
  Tensor xd = x.detach(), wd = w.detach();
  Tensor y = mm(xd, wd, false, true, b.defined() ? b.detach() : Tensor());
  bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.defined() && b.requires_grad();
  return record("linear", {x, w, b}, y, [mm, xd, wd, gx, gw, gb, dt](const Tensor& gy0) {
    Tensor gy = gy0.dtype() == dt ? gy0 : gy0.to(dt);
    return grads{gx ? mm(gy, wd, false, false, Tensor()) : Tensor(), gw ? mm(gy, xd, true, false, Tensor()) : Tensor(),
                 gb ? sum(gy, {0}) : Tensor()};
  });
}

}  // namespace kiln::ops
