// The kernels of ops::bn_finalize (declared in core/ops/conv_fusion.h with its contract): a training
// batch norm's finalize from per-channel sums, one launch forward and one backward per call instead of
// the ~20 tiny launches each of the chain of public ops it was first written as (every fused batch norm
// of a ResNet-50 step calls it: 32 per step, forward and backward; the chain is kept as
// bn_finalize_unfused, the reference of the tests and what a device without the kernels runs).
// Math in f64 on both devices, rounded once per output. Tests: tests/core/conv_fusion_test.cpp
// (BnFinalize*), tests/gpu/conv_fusion_test.cpp (CudaBnFinalize*).
#pragma once
#include "core/kernel_slot.h"
#include "core/ops/conv_fusion.h"
#include "core/tensor.h"

namespace kiln::ops {

// bn_finalize as the chain of public ops (mul_scalar, square, sub, relu, add_scalar, sqrt, div, mul,
// the casts), recorded by autograd op by op: the same contract, values equal to f32 rounding.
BnFinalized bn_finalize_unfused(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma,
                                const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                double momentum, double eps, DType out);

}  // namespace kiln::ops

namespace kiln {

// --- the kernels (core/kernel_slot.h); the op has checked shapes and dtypes: sum, sumsq (C) f32;
// gamma, beta (C) f32 or undefined (1 and 0); running_mean/var (C) f32, both or neither; count >= 2.
// forward: returns (2, C) in `out`: row 0 scale = gamma*invstd, row 1 bias = beta - mean*scale; fills
//   *saved with (3, C) f32: mean, invstd, var (the clamped biased variance), the backward's state;
//   updates the running statistics in place when defined (the variance unbiased by count/(count-1)).
// backward: from g (2, C) f32 (the gradients of scale and bias), saved and gamma, returns (4, C) f32:
//   the gradients of sum, sumsq, gamma and beta (var = max(sumsq/count - mean^2, 0): no gradient
//   through the clamp where var <= 0, as relu's backward).
struct BnFinalizeForward {
  Tensor scale_bias;  // (2, C) in `out`
  Tensor saved;       // (3, C) f32
};
extern KernelSlot<BnFinalizeForward (*)(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma,
                                        const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                        double momentum, double eps, DType out)>
    bn_finalize_forward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& g, const Tensor& saved, const Tensor& gamma, int64_t count)>
    bn_finalize_backward_kernel;

}  // namespace kiln
