// Batch normalisation over the channel (last) dim of NHWC activations (or (N, C) features).
//   training: normalise with the batch statistics and update running_mean/var in place
//             (running = (1-momentum)*running + momentum*batch; the variance update is unbiased, as in PyTorch)
//   eval:     normalise with running_mean/var
// x: (N, C) or (N, H, W, C) (any rank >= 2, channels last); gamma, beta, running_*: (C).
// gamma/beta may be undefined (1 and 0: affine off); running_mean/var may both be undefined in
// training (batch statistics only, PyTorch's track_running_stats=False); eval needs them.
// Statistics are always computed in f32 (f64 for f64 x); bf16/f16 x gives y in its dtype.
// Kernels: core/cpu/batch_norm.cpp (own OpenMP loops, measured against oneDNN there) and
// core/cuda/batch_norm_cuda.cu, through the kernel slots declared below. Recorded by autograd
// (gradients for x, gamma, beta). Tests: tests/core/batch_norm_test.cpp.
#pragma once
#include <memory>

#include "core/kernel_slot.h"
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

namespace kiln {

// The batch-norm backward's gradients (batch_norm_backward_kernel, batch_norm_relu_backward_kernel).
struct BatchNormGradients {
  Tensor dx, dgamma, dbeta;
  Tensor dresidual;  // batch_norm_relu_backward with a residual only
};

// --- batch norm's kernels (core/kernel_slot.h), channels last: x is M rows of C channels; the op
// checks shapes. gamma, beta (C) may be undefined (1 and 0); running_mean/var (C) may be undefined
// in training only. Statistics in f32 (f64 on the CPU for f64 x), eps inside the square root.
// forward: training normalises with the batch mean and biased variance and updates the running
//   statistics in place when defined (running = (1-momentum)*running + momentum*batch, the variance
//   unbiased by M/(M-1)); eval normalises with the running statistics. y in x's dtype.
//   *save_mean, *save_invstd (when not null) receive this device's copy of the per-channel mean and
//   1/sqrt(var + eps) actually used (new (C) tensors, a floating dtype of the kernel's choice); *saved
//   (when not null) an opaque state of the kernel's own for the backward, or null (cuDNN's reserve
//   space on CUDA; the CPU keeps none). With x and gamma, the backward's only state.
// backward: grad_out of x's shape, any floating dtype; dgamma = sum(dy * xhat), dbeta = sum(dy)
//   (always, gamma defined or not), in f32 (f64 for f64 x); dx in x's dtype:
//   training: gamma*invstd * (dy - dbeta/M - xhat*dgamma/M); eval: gamma*invstd * dy. dx may be
//   left undefined when !need_dx.
extern KernelSlot<Tensor (*)(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                             const Tensor& running_var, bool training, double momentum, double eps,
                             Tensor* save_mean, Tensor* save_invstd, std::shared_ptr<void>* saved)>
    batch_norm_forward_kernel;
extern KernelSlot<BatchNormGradients (*)(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                         const Tensor& save_mean, const Tensor& save_invstd,
                                         const std::shared_ptr<void>& saved, bool training, bool need_dx)>
    batch_norm_backward_kernel;
// batch_norm_relu_forward: relu(batch_norm_forward(x, ...) + residual) in one pass over the rows
//   (residual undefined: relu(batch_norm_forward(...))); residual has x's shape and dtype. The same
//   bits as the three kernels one after the other (batch_norm_forward, binary add, unary relu:
//   the sum rounded to x's dtype before the add), the same running-statistics update, and
//   save_mean/save_invstd/saved for batch_norm_relu_backward. A device may instead compute the
//   three in one library call (cuDNN's BN_ADD_ACTIVATION): its values then match to rounding, not
//   bit for bit. A device may leave it unset (with the backward): the op then runs the three ops.
// batch_norm_relu_backward: the gradients of batch_norm_relu_forward from grad_out and its output y:
//   g = relu_backward(grad_out, y), then batch_norm_backward's dx, dgamma, dbeta of g, and
//   dresidual = g when has_residual. beta is the forward's (cuDNN's fused backward reads it).
extern KernelSlot<Tensor (*)(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                             const Tensor& running_var, bool training, double momentum, double eps,
                             const Tensor& residual, Tensor* save_mean, Tensor* save_invstd,
                             std::shared_ptr<void>* saved)>
    batch_norm_relu_forward_kernel;
extern KernelSlot<BatchNormGradients (*)(const Tensor& grad_out, const Tensor& y, const Tensor& x,
                                         const Tensor& gamma, const Tensor& beta, const Tensor& save_mean,
                                         const Tensor& save_invstd, const std::shared_ptr<void>& saved,
                                         bool training, bool need_dx, bool has_residual)>
    batch_norm_relu_backward_kernel;
// counter += by for a one-element i64 counter, on its own device without a host read (batch norm's
// num_batches_tracked, layers/norm.cpp).
extern KernelSlot<void (*)(const Tensor& counter, int64_t by)> increment_i64_kernel;

}  // namespace kiln
