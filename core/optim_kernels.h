// The optimizers' fused steps and the gradient utilities as kernel slots (core/kernel_slot.h): one
// call for every parameter, and the loss scaler's, the gradient norm's, clipping's and the weight
// EMA's kernels. Used by optim/ (sgd.cpp, lars.cpp, adamw.cpp, loss_scaler.cpp, param.cpp, ema.cpp) and
// core/ops/reduce.cpp (sum_of_squares, max_abs). Kernels: core/cpu/sgd.cpp, lars.cpp, adamw.cpp,
// grad_utils.cpp; core/cuda/optim_cuda.cu, ema_cuda.cu. Tests: tests/optim/*_test.cpp,
// tests/gpu/optim_test.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "core/kernel_slot.h"
#include "core/loss_scale_rule.h"
#include "core/tensor.h"

namespace kiln {

// --- the optimizers' fused steps (optim/sgd.cpp, optim/adamw.cpp): one call for every parameter.
// param and buffers f32; grad f32 (f16 or bf16 too on a GPU) of the param's shape; all on one device.
struct SgdStepEntry {
  Tensor param, grad, momentum_buffer;  // momentum_buffer: f32, used when momentum != 0
  double lr = 0.1, weight_decay = 0.0;
  double lr_mult = 1.0;  // with SgdStepOptions::lr (a GPU): this entry's lr is float(*lr * lr_mult)
  bool first_step = false;  // momentum buffer not initialised yet: buf = grad (PyTorch)
};
struct SgdStepOptions {
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  // Optional i32 [] on the parameters' device (the fp16 loss scaler's found-inf flag): when it
  // holds a nonzero value the step changes nothing. Read there, never by the host.
  Tensor skip;
  // Optional f64 [] on the parameters' device (a GPU; the optimizer's device_lr()): the base learning
  // rate, read by the kernel (so that a captured step, tools/engine/cuda_graph.h, takes each step's
  // value); each entry then uses float(*lr * lr_mult) in place of its `lr`. The CPU kernels use `lr`.
  Tensor lr;
};
// LARS (optim/lars.h): SGD with momentum whose step is scaled per tensor by a trust ratio computed
// from the tensor's norms on its own device (no host read).
struct LarsStepEntry {
  Tensor param, grad, momentum_buffer;  // momentum_buffer: f32, zeros before the first step
  double lr = 0.1, weight_decay = 0.0;
  double lr_mult = 1.0;  // with LarsStepOptions::lr, as SgdStepEntry::lr_mult
  bool adapt = true;  // false: trust = 1 (the excluded biases and batch-norm parameters)
};
struct LarsStepOptions {
  double momentum = 0.9, eta = 0.001, epsilon = 0.0;
  bool nesterov = false;
  Tensor skip;  // as SgdStepOptions::skip
  Tensor lr;    // as SgdStepOptions::lr
};
struct AdamWStepEntry {
  Tensor param, grad, exp_avg, exp_avg_sq;  // moments f32
  Tensor max_exp_avg_sq;  // amsgrad only (f32): the running max of exp_avg_sq, used in its place
  double lr = 1e-3, weight_decay = 0.0;
  int64_t step = 1;  // the step being taken, counted from 1 (bias correction)
  int64_t row = 0;   // with AdamWStepOptions::values: the row holding this entry's per-step values
};
struct AdamWStepOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // Optional f32 (P, 3) on the parameters' device (a GPU; AdamW::write_step_values): row `row` of an
  // entry holds float(1 - lr*wd), float(lr / (1 - beta1^t)), float(sqrt(1 - beta2^t)) for its step,
  // read by the kernel in place of the values from the entry's lr, weight_decay and step. The CPU
  // kernel uses the entry's.
  Tensor values;
};

// In place, PyTorch's arithmetic in f32 (scalars in double first):
// SGD: g += wd*p; buf = m*buf + (1-dampening)*g (buf = g at the first step); g = nesterov ? g + m*buf : buf;
//      p -= lr*g (no decay term at all when wd = 0: 0 * inf would be NaN).
// AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2 (amsgrad: vmax = max(vmax, v) replaces v);
//      p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
extern KernelSlot<void (*)(const std::vector<SgdStepEntry>& entries, const SgdStepOptions& options)> sgd_step_kernel;
extern KernelSlot<void (*)(const std::vector<AdamWStepEntry>& entries, const AdamWStepOptions& options)>
    adamw_step_kernel;
// LARS, per entry (norms of the f32 param and of the raw gradient, accumulated in f64 on the CPU, f32
// partials summed in f64 on a GPU; the rest in f32):
//   trust = adapt && ||p|| > 0 && ||g|| > 0 ? eta * ||p|| / (||g|| + wd * ||p|| + epsilon) : 1
//   d = g + wd*p (no term when wd = 0); buf = momentum * buf + lr * trust * d;
//   p -= nesterov ? momentum * buf + lr * trust * d : buf
extern KernelSlot<void (*)(const std::vector<LarsStepEntry>& entries, const LarsStepOptions& options)> lars_step_kernel;

// --- gradient utilities (optim/loss_scaler.cpp, optim/param.cpp, optim/ema.cpp); f32 tensors:
// every element x *= float(factor) in place; false if any result is inf or NaN (loss-scaler unscale,
// gradient clipping).
extern KernelSlot<bool (*)(const std::vector<Tensor>& xs, double factor)> scale_and_check_finite_kernel;
// The fp16 loss scaler kept on the device (optim/loss_scaler.h, device mode), so that a GPU step
// reads nothing back: `state` is f64 (4) as core/loss_scale_rule.h lays it out, `found_inf` an
// i32 [], `scale32` an f32 [] (the scale the loss is multiplied by), all on the gradients' device.
// unscale: every gradient *= float(1 / scale) in place; found_inf = 1 when any value or result is
// not finite (left as it is otherwise).
extern KernelSlot<void (*)(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf)>
    loss_scale_unscale_kernel;
// update: apply_loss_scale_rule with found_inf as the verdict, scale32 = float(the new scale), then
// found_inf = 0.
extern KernelSlot<void (*)(const Tensor& state, const Tensor& scale32, const Tensor& found_inf,
                           const LossScaleRule& rule)>
    loss_scale_update_kernel;
// clip_grad_norm (optim/param.h) without reading back: norm = sqrt(sum of g^2) reduced as
// sum_of_squares does, coef = max_norm / (norm + 1e-6), and when the norm is finite and coef < 1
// every g *= float(coef) in place, all on the gradients' device: the bits of the host-decided
// clipping (sum_of_squares, then scale_and_check_finite), with nothing read back. GPU only.
extern KernelSlot<void (*)(const std::vector<Tensor>& grads, double max_norm)> clip_grad_norm_on_device_kernel;
// sum of x^2 over every element of every tensor, accumulated in f64.
extern KernelSlot<double (*)(const std::vector<Tensor>& xs)> sum_of_squares_kernel;
// max |x| over the elements (0 when empty); NaN when any element is NaN.
extern KernelSlot<double (*)(const Tensor& x)> max_abs_kernel;
// dst (packed f32 on a GPU, values.size() elements) = values, queued on dst's device without a
// host wait: the values travel as kernel arguments (no host buffer to keep). AdamW's per-step values,
// written before each step or graph launch (optim/adamw.cpp). GPU only.
extern KernelSlot<void (*)(const Tensor& dst, const std::vector<float>& values)> write_values_kernel;
// ema = decay * ema + (1 - decay) * live, f32, in place (1 - decay computed in f32), unless `skip`
// (undefined: never) holds a value > 0: an f64 [1] on the tensors' device, read there (the fp16 loss
// scaler's count of non-finite steps in a row, LossScaler::last_step_skipped(), so that a GPU step's
// EMA follows the device's verdict without reading it back).
extern KernelSlot<void (*)(const Tensor& ema, const Tensor& live, float decay, const Tensor& skip)> ema_update_kernel;
// dst = src (same dtype and size, contiguous, one device) unless `skip` holds a value > 0, as above:
// the EMA's copied tensors (batch-norm statistics, counters).
extern KernelSlot<void (*)(const Tensor& dst, const Tensor& src, const Tensor& skip)> ema_copy_kernel;

// The argument check both backends' loss_scale_unscale/loss_scale_update kernels start with.
inline void check_loss_scale_state(const char* op, const Tensor& state, const Tensor& found_inf) {
  KILN_CHECK(state.dtype() == DType::f64 && state.numel() == kLossScaleStateSize && state.is_contiguous() &&
                 found_inf.dtype() == DType::i32 && found_inf.numel() == 1 && state.device() == found_inf.device(),
             op, ": state must be f64 (", static_cast<int>(kLossScaleStateSize), ") and found_inf i32 [] on one device, got ",
             state.str(), " and ", found_inf.str());
}

}  // namespace kiln
