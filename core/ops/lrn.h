// Local response normalisation across channels (AlexNet), PyTorch's definition on NHWC:
//   y = x / (k + alpha/size * sum_{c' in window(c)} x_{c'}^2)^beta, window of `size` channels
//   centred on c (size/2 before, (size-1)/2 after), zero-padded at the edges.
// Recorded by autograd. Tests: tests/core/lrn_test.cpp.
#pragma once
#include "core/tensor.h"

namespace kiln::ops {

Tensor local_response_norm(const Tensor& x, int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);

}  // namespace kiln::ops
