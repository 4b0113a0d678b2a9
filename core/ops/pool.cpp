// Pooling: the ops (checks, one backward closure each); the kernels fill the slots of pool.h
// (core/cpu/pool.cpp, core/cuda/pool_cuda.cu). Tests: tests/core/pool_test.cpp,
// tests/gpu/ops_dispatch_test.cpp.
#include "core/ops/pool.h"

#include <limits>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/nn_util.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(max_pool2d_forward);
KILN_DEFINE_KERNEL_SLOT(max_pool2d_backward);
KILN_DEFINE_KERNEL_SLOT(avg_pool2d_forward);
KILN_DEFINE_KERNEL_SLOT(avg_pool2d_backward);
KILN_DEFINE_KERNEL_SLOT(adaptive_avg_pool2d_forward);
KILN_DEFINE_KERNEL_SLOT(adaptive_avg_pool2d_backward);
KILN_DEFINE_KERNEL_SLOT(global_avg_pool_forward);
KILN_DEFINE_KERNEL_SLOT(global_avg_pool_backward);
}  // namespace kiln

namespace kiln::ops {

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// PyTorch's pooling_output_shape: in ceil mode the last window must start inside the input or the
// left padding.
int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode) {
  int64_t out = floor_div(in + 2 * pad - k + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

Device check_input(const char* op, const Tensor& x) {
  const Device d = op_device(op, {x});
  nn::check_floating(op, "x", x);
  KILN_CHECK(x.dim() == 4, op, ": x must be 4-D (N, H, W, C), got ", x.str());
  KILN_CHECK(x.size(1) * x.size(2) <= std::numeric_limits<int32_t>::max(), op, ": input plane of ", x.str(),
             " is too large");
  return d;
}

Device check_pool(const char* op, const Tensor& x, const Pool2dParams& p) {
  const Device d = check_input(op, x);
  KILN_CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0, op, ": kernel ", p.kernel_h, "x",
             p.kernel_w, " and stride ", p.stride_h, "x", p.stride_w, " must be positive (x ", x.str(), ")");
  KILN_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w, op,
             ": padding ", p.pad_h, "x", p.pad_w, " must be >= 0 and at most half the kernel ", p.kernel_h, "x",
             p.kernel_w, " (x ", x.str(), ")");
  Shape out = pool2d_output_shape(x.shape(), p);
  KILN_CHECK(out[1] > 0 && out[2] > 0, op, ": kernel ", p.kernel_h, "x", p.kernel_w, " with padding ", p.pad_h,
             "x", p.pad_w, " does not fit input ", x.str(), " (output ", shape_str(out), ")");
  return d;
}

// The backward kernels take grad_out in x's dtype, and may return dx in their compute dtype.
Tensor as_dtype(const Tensor& t, DType dt) { return t.dtype() == dt ? t : t.to(dt); }
Tensor in_dtype(const Tensor& dx, DType dt) { return as_dtype(dx, dt); }

}  // namespace

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p) {
  KILN_CHECK(x.size() == 4, "pool2d_output_shape: x must be 4-D (N, H, W, C), got ", shape_str(x));
  return {x[0], pool_out_size(x[1], p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode),
          pool_out_size(x[2], p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode), x[3]};
}

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  const Device d = check_pool("max_pool2d", x, p);
  const auto backward = max_pool2d_backward_kernel.get(d, "max_pool2d");
  Tensor idx;  // the argmax of each window, kept for the backward
  Tensor y = max_pool2d_forward_kernel.get(d, "max_pool2d")(x.detach(), p, needs_record({x}) ? &idx : nullptr);
  return record("max_pool2d", {x}, y, [backward, idx, p, xs = x.shape(), dt = x.dtype()](const Tensor& gy) {
    return grads{in_dtype(backward(as_dtype(gy, dt), idx, xs, p), dt)};
  });
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  const Device d = check_pool("avg_pool2d", x, p);
  const auto backward = avg_pool2d_backward_kernel.get(d, "avg_pool2d");
  Tensor y = avg_pool2d_forward_kernel.get(d, "avg_pool2d")(x.detach(), p);
  return record("avg_pool2d", {x}, y, [backward, p, xs = x.shape(), dt = x.dtype()](const Tensor& gy) {
    return grads{in_dtype(backward(as_dtype(gy, dt), xs, p), dt)};
  });
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  const Device d = check_input("adaptive_avg_pool2d", x);
  KILN_CHECK(out_h > 0 && out_w > 0, "adaptive_avg_pool2d: output size ", out_h, "x", out_w,
             " must be positive (x ", x.str(), ")");
  KILN_CHECK(x.size(1) > 0 && x.size(2) > 0, "adaptive_avg_pool2d: empty input plane in ", x.str());
  const auto backward = adaptive_avg_pool2d_backward_kernel.get(d, "adaptive_avg_pool2d");
  Tensor y = adaptive_avg_pool2d_forward_kernel.get(d, "adaptive_avg_pool2d")(x.detach(), out_h, out_w);
  return record("adaptive_avg_pool2d", {x}, y, [backward, xs = x.shape(), dt = x.dtype()](const Tensor& gy) {
    return grads{in_dtype(backward(as_dtype(gy, dt), xs), dt)};
  });
}

Tensor global_avg_pool(const Tensor& x) {
  const Device d = check_input("global_avg_pool", x);
  KILN_CHECK(x.size(1) > 0 && x.size(2) > 0, "global_avg_pool: empty input plane in ", x.str());
  const auto backward = global_avg_pool_backward_kernel.get(d, "global_avg_pool");
  Tensor y = global_avg_pool_forward_kernel.get(d, "global_avg_pool")(x.detach());
  return record("global_avg_pool", {x}, y, [backward, xs = x.shape(), dt = x.dtype()](const Tensor& gy) {
    return grads{in_dtype(backward(as_dtype(gy, dt), xs), dt)};
  });
}

}  // namespace kiln::ops
