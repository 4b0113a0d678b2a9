// scale_add_relu: y = relu(x * scale + residual), scale per sample and channel: x and residual
// (N, H, W, C) NHWC, scale (N, C). The end of a squeeze-and-excitation block (layers/blocks.h: the
// residual branch times its gate, plus the shortcut, then the ReLU) in one pass over the activations
// instead of a broadcast multiply, an add and a ReLU (each with its own backward pass). Recorded by
// autograd: the gradients reach x, scale and residual.
// Floating dtypes of one kind. The fused kernel is optional for a device (KernelSlot::find): where a
// device has none (the GPU), or for dtypes other than f32 (bf16, f16, f64), the op runs its parts,
// ops::mul, ops::add and ops::relu, with the same values and gradients.
// Tests: tests/core/scale_add_relu_test.cpp.
#pragma once
#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

Tensor scale_add_relu(const Tensor& x, const Tensor& scale, const Tensor& residual);

}  // namespace kiln::ops

namespace kiln {

// --- scale_add_relu's kernels (core/kernel_slot.h), f32, contiguous: forward y = max(0, x * scale[n, c]
// + residual) (NaN propagates: relu(NaN) = NaN); backward from gy and the forward's y, with m = gy where
// y > 0 or y is NaN, else 0 (relu_backward's rule): dx = m * scale[n, c], dresidual = m, dscale[n, c] =
// the sum over H and W of m * x (accumulated in double).
struct ScaleAddReluGrads {
  Tensor x, scale, residual;
};
extern KernelSlot<Tensor (*)(const Tensor& x, const Tensor& scale, const Tensor& residual)> scale_add_relu_forward_kernel;
extern KernelSlot<ScaleAddReluGrads (*)(const Tensor& grad_out, const Tensor& y, const Tensor& x, const Tensor& scale)>
    scale_add_relu_backward_kernel;

}  // namespace kiln
