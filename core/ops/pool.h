// Pooling on NHWC activations. The ops are core/ops/pool.cpp; kernels core/cpu/pool.cpp (own vectorised
// loops; it says why not oneDNN) and core/cuda/pool_cuda.cu.
// Recorded by autograd. Tests: tests/core/pool_test.cpp.
//   max_pool2d / avg_pool2d: x (N, H, W, C) -> (N, OH, OW, C); padding (at most half the kernel),
//     ceil_mode and count_include_pad as in PyTorch; max pooling ignores the padding.
//     OH = floor_or_ceil((H + 2*pad_h - kernel_h) / stride_h) + 1, minus one in ceil mode when the
//     last window would start past the input and its left padding.
//   global_avg_pool: (N, H, W, C) -> (N, C).
//   adaptive_avg_pool2d: PyTorch's bins (start = floor(i*H/OH), end = ceil((i+1)*H/OH)).
#pragma once
#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

struct Pool2dParams {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg only, PyTorch's default
};

// (N, OH, OW, C) for an input of shape x (no checks beyond the rank).
Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p);

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor global_avg_pool(const Tensor& x);
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

}  // namespace kiln::ops

namespace kiln {

// --- the pools' kernels (core/kernel_slot.h), NHWC, PyTorch's windows; inputs checked by the op.
// Forward outputs in x's dtype; grad_out comes in x's dtype, and dx may be returned in it or in the
// compute dtype (the op converts).
// max: *indices (if not null) receives the argmax of each window as h*W + w in its image (i32),
// which the backward takes. global_avg_pool: (N, H, W, C) -> (N, C).
extern KernelSlot<Tensor (*)(const Tensor& x, const ops::Pool2dParams& p, Tensor* indices)> max_pool2d_forward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& grad_out, const Tensor& indices, const Shape& x_shape,
                             const ops::Pool2dParams& p)>
    max_pool2d_backward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& x, const ops::Pool2dParams& p)> avg_pool2d_forward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& grad_out, const Shape& x_shape, const ops::Pool2dParams& p)>
    avg_pool2d_backward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& x, int64_t out_h, int64_t out_w)> adaptive_avg_pool2d_forward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& grad_out, const Shape& x_shape)> adaptive_avg_pool2d_backward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& x)> global_avg_pool_forward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& grad_out, const Shape& x_shape)> global_avg_pool_backward_kernel;

}  // namespace kiln
