// The kernels of ops::bn_finalize (declared in core/ops/conv_fusion.h with its contract): a training
// batch norm's finalize from per-channel sums, one launch forward and one backward per call instead of
// the ~20 tiny launches each of the chain of public ops it was first written as (every fused batch norm
// of a ResNet-50 step calls it: 32 per step, forward and backward; the chain is kept as
// bn_finalize_unfused, the reference of the tests and what a device without the kernels runs).
// Math in f64 on both devices, rounded once per output. Tests: tests/core/conv_fusion_test.cpp
// (BnFinalize*), tests/gpu/conv_fusion_test.cpp (CudaBnFinalize*).
#pragma once
#include <math.h>  // sqrt on the host and in CUDA device code

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

#ifndef KILN_HOST_DEVICE  // as core/rng.h defines it
#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
#endif

namespace kiln {

// One channel's finalize in f64, written once for both devices' kernels (core/cpu/bn_finalize.cpp,
// core/cuda/bn_finalize_cuda.cu) as core/loss_scale_rule.h is: from the sums over n values, gamma and
// beta (1 and 0 when undefined), the scale and bias and what the backward keeps.
struct BnFinalizeChannel {
  double scale, bias, mean, invstd, var;
};
KILN_HOST_DEVICE inline BnFinalizeChannel bn_finalize_channel(double sum, double sumsq, double n, double gamma,
                                                              double beta, double eps) {
  BnFinalizeChannel r;
  r.mean = sum / n;
  const double v = sumsq / n - r.mean * r.mean;
  r.var = v > 0 ? v : 0.0;
  r.invstd = 1.0 / sqrt(r.var + eps);
  r.scale = gamma * r.invstd;
  r.bias = beta - r.mean * r.scale;
  return r;
}
// The running statistics' update: running = (1 - momentum) * running + momentum * batch, the variance
// unbiased by n / (n - 1).
KILN_HOST_DEVICE inline void bn_finalize_running(float* rm, float* rv, const BnFinalizeChannel& c, double n,
                                                 double momentum) {
  *rm = static_cast<float>((1.0 - momentum) * *rm + momentum * c.mean);
  *rv = static_cast<float>((1.0 - momentum) * *rv + momentum * c.var * n / (n - 1.0));
}
// The gradients of sum, sumsq, gamma and beta from those of scale and bias (bias = beta - mean * scale;
// no gradient through the variance's clamp where var <= 0, as relu's backward).
struct BnFinalizeGrads {
  double sum, sumsq, gamma, beta;
};
KILN_HOST_DEVICE inline BnFinalizeGrads bn_finalize_channel_backward(double g_scale, double g_bias, double mean,
                                                                     double invstd, double var, double gamma,
                                                                     double n) {
  const double g_scale_total = g_scale - g_bias * mean;
  const double g_invstd = gamma * g_scale_total;
  const double g_var = var > 0 ? -0.5 * g_invstd * invstd * invstd * invstd : 0.0;
  const double g_mean = -g_bias * gamma * invstd - 2.0 * mean * g_var;
  return {g_mean / n, g_var / n, invstd * g_scale_total, g_bias};
}

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
