// Local response normalisation across channels (AlexNet), PyTorch's definition, channels last
// (x is (N, C) or (N, H, W, C)):
//   y_c = x_c / (k + alpha/size * sum_{c' = c - size/2}^{c + (size-1)/2} x_{c'}^2)^beta
// i.e. a window of `size` channels, size/2 before c and (size-1)/2 after, zero-padded at the edges,
// alpha divided by `size` (torch.nn.functional.local_response_norm pads the squares by (size/2,
// (size-1)/2) and average-pools them; checked against torch 1.13 in f64 for size 1, 2, 4, 5 to 1e-16).
// The op is core/ops/lrn.cpp; kernels: core/cpu/lrn.cpp (own loops), core/cuda/lrn_cuda.cu. Recorded by autograd. Tests: tests/core/lrn_test.cpp.
#pragma once
#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

Tensor local_response_norm(const Tensor& x, int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);

}  // namespace kiln::ops

namespace kiln {

// --- local response norm's kernels (core/kernel_slot.h), channels last: y and dx in x's dtype
// (grad_out any floating dtype); the backward recomputes the denominators from x.
extern KernelSlot<Tensor (*)(const Tensor& x, int64_t size, double alpha, double beta, double k)> lrn_forward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& grad_out, const Tensor& x, int64_t size, double alpha, double beta,
                             double k)>
    lrn_backward_kernel;

}  // namespace kiln
