// Pooling on NHWC activations. CPU: oneDNN. Recorded by autograd. Tests: tests/core/pool_test.cpp.
//   max_pool2d / avg_pool2d: x (N, H, W, C) -> (N, OH, OW, C); ceil_mode as in PyTorch.
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

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor global_avg_pool(const Tensor& x);
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

}  // namespace kiln::ops
