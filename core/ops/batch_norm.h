// Batch normalisation over the channel (last) dim of NHWC activations (or (N, C) features).
//   training: normalise with the batch statistics and update running_mean/var in place
//             (running = (1-momentum)*running + momentum*batch; the variance update is unbiased, as in PyTorch)
//   eval:     normalise with running_mean/var
// x: (N, C) or (N, H, W, C) (any rank >= 2, channels last); gamma, beta, running_*: (C).
// gamma/beta may be undefined (1 and 0: affine off); running_mean/var may both be undefined in
// training (batch statistics only, PyTorch's track_running_stats=False); eval needs them.
// Statistics are always computed in f32 (f64 for f64 x); bf16/f16 x gives y in its dtype.
// Kernels: core/cpu/batch_norm.cpp (own OpenMP loops, measured against oneDNN there) and
// core/cuda/batch_norm_cuda.cu, through the kernel table (core/kernels.h). Recorded by autograd
// (gradients for x, gamma, beta). Tests: tests/core/batch_norm_test.cpp.
#pragma once
#include "core/tensor.h"

namespace kiln::ops {

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

// relu(batch_norm(x, ...) + residual), or relu(batch_norm(x, ...)) when residual is undefined: the
// ResNet block's "BN, (add the shortcut,) ReLU" in one pass over the activations where the device
// has the fused kernel (the CPU), else the three ops. Values, gradients (for x, gamma, beta and
// residual) and running statistics are bit for bit those of the three ops. residual: x's shape and
// dtype. The backward keeps only y (the next layer's input) besides what batch_norm keeps. On CUDA
// the fused kernel is cuDNN's BN_ADD_ACTIVATION where cuDNN takes the case (equal to rounding).
Tensor batch_norm_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                       const Tensor& residual = Tensor());
// Process-wide: whether batch_norm_relu takes the device's fused kernel (default on;
// KILN_FUSED_BN_RELU=0 in the environment starts it off, for A/B timings). Off, it runs the three ops.
void set_batch_norm_relu_fused(bool on);
bool batch_norm_relu_fused();

}  // namespace kiln::ops
