// SiLU (swish, PyTorch's torch.nn.functional.silu): y = x * sigmoid(x), elementwise, any shape.
// Floating dtypes; f16/bf16 are computed in f32 and rounded once. PyTorch's formulas, value for value:
// y = x / (1 + exp(-x)) (NaN stays NaN, y(+inf) = +inf, y(-inf) = NaN as in PyTorch), and
// dy/dx = s * (1 + x * (1 - s)), s = 1 / (1 + exp(-x)). Recorded by autograd.
// The op is core/ops/silu.cpp; its kernels fill the slots declared below (core/kernel_slot.h):
// core/cpu/silu.cpp and core/cuda/silu_cuda.cu. Tests: tests/core/silu_test.cpp, tests/gpu/silu_test.cpp.
#pragma once
#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

Tensor silu(const Tensor& x);

}  // namespace kiln::ops

namespace kiln {

// --- silu's kernels (core/kernel_slot.h): y = x * sigmoid(x); dx = gy * s * (1 + x * (1 - s)),
// s = sigmoid(x). Output dtype = x's dtype (the backward's: grad_out's).
extern KernelSlot<Tensor (*)(const Tensor& x)> silu_forward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& grad_out, const Tensor& x)> silu_backward_kernel;

}  // namespace kiln
