// Softmax cross-entropy, mean over the batch, computed in f32 (log-sum-exp with the max subtracted).
//   logits: (N, K) floating; labels: (N) i64 or i32 in [0, K)
//   label_smoothing e in [0, 1]: target = (1-e)*onehot + e/K (PyTorch's definition), i.e.
//   loss_i = (1-e) * nll_i + e * mean_k(-log p_ik)
// class_weights (optional, (K) floating, >= 0, on the logits' device): PyTorch's weighted mean,
//   loss = sum_i [(1-e) w_{y_i} nll_i + (e/K) sum_k w_k (-log p_ik)] / sum_i w_{y_i}
// (F.cross_entropy(weight=w, label_smoothing=e)); without weights, w = 1 and the divisor is N.
// NOTE: a batch whose labels all have weight 0 gives loss 0 and a zero gradient (PyTorch: NaN).
// A label outside [0, K) is an error naming the label, its index and K on the CPU; on a GPU (where a
// kernel cannot throw without a sync) it makes the loss and that row's gradient NaN.
// CUDA: core/cuda/loss_cuda.cu (f32, f16, bf16 logits; labels on the same GPU).
// Returns a scalar (shape []) in f32 (f64 for f64 logits; bf16/f16 logits get an f32 loss).
// Recorded by autograd (gradient to logits, in the logits' dtype). CPU: core/cpu/loss.cpp (the kernel
// slots declared below).
// Tests: tests/core/loss_test.cpp.
#pragma once
#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing = 0.0,
                     const Tensor& class_weights = Tensor());
// Cross-entropy with probability targets (soft labels: MixUp/CutMix, data/mix.h), mean over the
// batch, as F.cross_entropy(logits, targets, weight=w, label_smoothing=e) with float targets:
//   t' = (1-e) t + e/K,  loss = (1/N) sum_i sum_k w_k t'_ik (-log softmax(z)_ik)   (w = 1 without weights)
//   dloss/dz_ik = (softmax_ik sum_j w_j t'_ij - w_k t'_ik) / N
// NOTE: the divisor is N even with class weights (PyTorch's definition for probability targets),
// not sum_i w_{y_i} as with class-index labels. targets: (N, K) floating, same device (not checked
// to sum to 1, as PyTorch). No gradient flows to the targets.
// CUDA: core/cuda/loss_cuda.cu. Tests: tests/core/soft_loss_test.cpp (golden against PyTorch).
Tensor soft_cross_entropy(const Tensor& logits, const Tensor& targets, double label_smoothing = 0.0,
                          const Tensor& class_weights = Tensor());
// Softmax over the last dim, in the input's dtype (computed in f32), not recorded (for evaluation and tests).
Tensor softmax(const Tensor& logits);

}  // namespace kiln::ops

namespace kiln {

// --- the losses' kernels (core/kernel_slot.h); logits (N, K) floating, N, K > 0; the op checks
// shapes and dtypes. Returned losses are scalars (shape []) in f32 (f64 on the CPU for f64 logits);
// gradients are in logits' dtype; grad_loss is a one-element floating tensor on the device.
// cross_entropy: labels (N) i64/i32, label smoothing e, class_weights (K) or undefined: the mean of
//   loss_i = (1-e)(lse_i - z_iy) + e mean_k(lse_i - z_ik), or PyTorch's weighted mean (divisor
//   S = sum_i w[y_i]; loss and gradient 0 when S = 0). A label outside [0, K): an error where the
//   kernel can throw (CPU), else a NaN loss and gradient row (CUDA). *saved (when not null) receives
//   the state this device's backward needs besides its other arguments (opaque to the op).
// The two losses' kernels share their signatures: `y` is the labels (cross_entropy) or the targets
// (soft_cross_entropy).
using LossForwardKernel = Tensor (*)(const Tensor& logits, const Tensor& y, double label_smoothing,
                                     const Tensor& class_weights, Tensor* saved);
using LossBackwardKernel = Tensor (*)(const Tensor& grad_loss, const Tensor& logits, const Tensor& y,
                                      double label_smoothing, const Tensor& class_weights, const Tensor& saved);
extern KernelSlot<LossForwardKernel> cross_entropy_forward_kernel;
extern KernelSlot<LossBackwardKernel> cross_entropy_backward_kernel;
// soft_cross_entropy: targets (N, K) floating; t' = (1-e) t + e/K, loss = (1/N) sum_ik w_k t'_ik (lse_i - z_ik)
//   (w = 1 without class_weights; divisor N either way); dz = (softmax sum_j w_j t'_ij - w_k t'_ik) / N
//   times grad_loss. *saved as for cross_entropy.
extern KernelSlot<LossForwardKernel> soft_cross_entropy_forward_kernel;
extern KernelSlot<LossBackwardKernel> soft_cross_entropy_backward_kernel;
// softmax over the last dim of (R, K) logits (K > 0), in logits' dtype (computed in f32, f64 for f64).
extern KernelSlot<Tensor (*)(const Tensor& logits)> softmax_kernel;

}  // namespace kiln
