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
