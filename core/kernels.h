// One table of device kernels per device (issue #18: an op written once, a device added without
// touching ops). A public op (core/ops/<op>.cpp) checks its inputs, finds its tensors' device
// (ops::op_device), takes the kernels it needs from that device's table and records one backward
// closure that calls the table again; it never branches on the device and never sees
// KILN_WITH_CUDA:
//
//   const Device d = op_device("silu", {x});
//   auto backward = kernel(d, &Kernels::silu_backward, "silu");
//   Tensor y = kernel(d, &Kernels::silu_forward, "silu")(x.detach());
//   return record("silu", {x}, y, [backward, xd = x.detach()](const Tensor& gy) { return grads{backward(gy, xd)}; });
//
// The tables: core/cpu/kernels_cpu.cpp (the CPU's, its kernels in core/cpu/) and
// core/cuda/kernels_cuda.cu (the CUDA backend's, its kernels in core/cuda/). kernels(device), in
// core/kernels.cpp, is the one place that selects a table, and the one place outside core/cuda/ where
// KILN_WITH_CUDA appears for kernels. An entry a device lacks is nullptr; kernel() then throws
// "<op>: no <device> kernel", never a silent fallback to another device.
//
// Kernel contract (every entry): inputs are detached tensors on the table's device, any strides;
// outputs are new contiguous tensors on that device; floating math in f32 (f64 on the CPU for f64
// tensors), f16/bf16 widened on entry and rounded once on exit; errors name the op.
//
// Every op with a kernel of its own goes through the table: conv2d, matmul, batch norm, the losses,
// elementwise and reductions, dropout, silu, local_response_norm, the pools; so do the optimizers'
// fused steps, the gradient utilities (unscale, norm, clip, EMA), the trainer's step statistics, and
// the device services (copies, fill, allocator, synchronize, memory info, cuDNN's benchmark switch,
// communicators) that core/device.h and core/comm.h expose. docs/adding_an_op.md is the guide.
// Tests: tests/core/silu_test.cpp (KernelTable, Silu), tests/core/dropout_test.cpp, tests/gpu/silu_test.cpp.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/comm.h"
#include "core/device.h"
#include "core/loss_scale_rule.h"
#include "core/ops/conv2d.h"
#include "core/ops/pool.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace kiln {

// --- the optimizers' fused steps (optim/sgd.cpp, optim/adamw.cpp): one call for every parameter.
// param and buffers f32; grad f32 (f16 or bf16 too on a GPU) of the param's shape; all on one device.
struct SgdStepEntry {
  Tensor param, grad, momentum_buffer;  // momentum_buffer: f32, used when momentum != 0
  double lr = 0.1, weight_decay = 0.0;
  bool first_step = false;  // momentum buffer not initialised yet: buf = grad (PyTorch)
};
struct SgdStepOptions {
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  // Optional i32 [] on the parameters' device (the fp16 loss scaler's found-inf flag): when it
  // holds a nonzero value the step changes nothing. Read there, never by the host.
  Tensor skip;
};
struct AdamWStepEntry {
  Tensor param, grad, exp_avg, exp_avg_sq;  // moments f32
  Tensor max_exp_avg_sq;  // amsgrad only (f32): the running max of exp_avg_sq, used in its place
  double lr = 1e-3, weight_decay = 0.0;
  int64_t step = 1;  // the step being taken, counted from 1 (bias correction)
};
struct AdamWStepOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

// --- conv2d's backward (core/ops/conv2d.cpp): what the op asks for and what it gets back.
struct Conv2dBackwardArgs {
  Shape x_shape, w_shape;  // the forward's input and weight shapes
  ops::Conv2dParams p;
  DType dtype = DType::f32;  // the forward's dtype (x, w and b share it)
  bool has_bias = false;     // the forward had a bias (whether or not its gradient is wanted)
  bool need_x = false, need_w = false, need_b = false;  // the gradients wanted
  // The forward's opaque handle (may be null), only for this backward: the CPU keeps its
  // reordered weights there for backward-data; CUDA leaves it null.
  std::shared_ptr<void> saved;
};
struct Conv2dGrads {
  Tensor dx, dw, db;  // undefined where not wanted
};

// The batch-norm backward's gradients (Kernels::batch_norm_backward).
struct BatchNormGradients {
  Tensor dx, dgamma, dbeta;
  Tensor dresidual;  // batch_norm_relu_backward with a residual only
};

class CachingAllocator;  // core/allocator.h

// The elementwise kernels' operations (core/ops/elementwise.h).
enum class ElementwiseBinary { add, sub, mul, div, relu_backward };
enum class ElementwiseUnary { relu, exp, log, sqrt, square };

struct Kernels {
  const char* device = "";  // "cpu", "cuda": for errors

  // --- dropout (core/ops/dropout.h): element i (row-major) is kept iff uniform_at(state, i) >= float(p),
  // kept values scaled by 1/(1-p) (a multiply: a dropped NaN stays NaN); the backward redraws the mask
  // from the same state. Output dtype = input dtype.
  Tensor (*dropout_forward)(const Tensor& x, double p, RngState state) = nullptr;
  Tensor (*dropout_backward)(const Tensor& grad_out, double p, RngState state) = nullptr;

  // --- silu (core/ops/silu.h): y = x * sigmoid(x); dx = gy * s * (1 + x * (1 - s)), s = sigmoid(x).
  // Output dtype = x's dtype (the backward's: grad_out's).
  Tensor (*silu_forward)(const Tensor& x) = nullptr;
  Tensor (*silu_backward)(const Tensor& grad_out, const Tensor& x) = nullptr;

  // --- local response norm (core/ops/lrn.h), channels last: y and dx in x's dtype (grad_out any
  // floating dtype); the backward recomputes the denominators from x.
  Tensor (*lrn_forward)(const Tensor& x, int64_t size, double alpha, double beta, double k) = nullptr;
  Tensor (*lrn_backward)(const Tensor& grad_out, const Tensor& x, int64_t size, double alpha, double beta,
                         double k) = nullptr;

  // --- pooling (core/ops/pool.h), NHWC, PyTorch's windows; inputs checked by the op. Forward outputs
  // in x's dtype; grad_out comes in x's dtype, and dx may be returned in it or in the compute dtype
  // (the op converts).
  // max: *indices (if not null) receives the argmax of each window as h*W + w in its image (i32),
  // which the backward takes. global_avg_pool: (N, H, W, C) -> (N, C).
  Tensor (*max_pool2d_forward)(const Tensor& x, const ops::Pool2dParams& p, Tensor* indices) = nullptr;
  Tensor (*max_pool2d_backward)(const Tensor& grad_out, const Tensor& indices, const Shape& x_shape,
                                const ops::Pool2dParams& p) = nullptr;
  Tensor (*avg_pool2d_forward)(const Tensor& x, const ops::Pool2dParams& p) = nullptr;
  Tensor (*avg_pool2d_backward)(const Tensor& grad_out, const Shape& x_shape, const ops::Pool2dParams& p) = nullptr;
  Tensor (*adaptive_avg_pool2d_forward)(const Tensor& x, int64_t out_h, int64_t out_w) = nullptr;
  Tensor (*adaptive_avg_pool2d_backward)(const Tensor& grad_out, const Shape& x_shape) = nullptr;
  Tensor (*global_avg_pool_forward)(const Tensor& x) = nullptr;
  Tensor (*global_avg_pool_backward)(const Tensor& grad_out, const Shape& x_shape) = nullptr;

  // --- optimizer steps, in place, PyTorch's arithmetic in f32 (scalars in double first):
  // SGD: g += wd*p; buf = m*buf + (1-dampening)*g (buf = g at the first step); g = nesterov ? g + m*buf : buf;
  //      p -= lr*g (no decay term at all when wd = 0: 0 * inf would be NaN).
  // AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2 (amsgrad: vmax = max(vmax, v) replaces v);
  //      p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
  void (*sgd_step)(const std::vector<SgdStepEntry>& entries, const SgdStepOptions& options) = nullptr;
  void (*adamw_step)(const std::vector<AdamWStepEntry>& entries, const AdamWStepOptions& options) = nullptr;

  // --- gradient utilities (optim/loss_scaler.cpp, optim/param.cpp, optim/ema.cpp); f32 tensors:
  // every element x *= float(factor) in place; false if any result is inf or NaN (loss-scaler unscale,
  // gradient clipping).
  bool (*scale_and_check_finite)(const std::vector<Tensor>& xs, double factor) = nullptr;
  // The fp16 loss scaler kept on the device (optim/loss_scaler.h, device mode), so that a GPU step
  // reads nothing back: `state` is f64 (4) as core/loss_scale_rule.h lays it out, `found_inf` an
  // i32 [], `scale32` an f32 [] (the scale the loss is multiplied by), all on the gradients' device.
  // unscale: every gradient *= float(1 / scale) in place; found_inf = 1 when any value or result is
  // not finite (left as it is otherwise).
  void (*loss_scale_unscale)(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf) = nullptr;
  // update: apply_loss_scale_rule with found_inf as the verdict, scale32 = float(the new scale), then
  // found_inf = 0.
  void (*loss_scale_update)(const Tensor& state, const Tensor& scale32, const Tensor& found_inf,
                            const LossScaleRule& rule) = nullptr;
  // sum of x^2 over every element of every tensor, accumulated in f64.
  double (*sum_of_squares)(const std::vector<Tensor>& xs) = nullptr;
  // max |x| over the elements (0 when empty); NaN when any element is NaN.
  double (*max_abs)(const Tensor& x) = nullptr;
  // ema = decay * ema + (1 - decay) * live, f32, in place (1 - decay computed in f32).
  void (*ema_update)(const Tensor& ema, const Tensor& live, float decay) = nullptr;

  // --- conv2d (core/ops/conv2d.h), NHWC x (N, H, W, Cin), w (Cout, KH, KW, Cin/groups), b (Cout) or
  // undefined, one dtype (f32, bf16, f16), shapes checked by the op, N >= 1 (the op answers an empty
  // batch itself). The forward returns y (N, OH, OW, Cout) in x's dtype; when `saved` is not null
  // (the backward will want dx) it may leave there a handle for the backward (the CPU's reordered
  // weights; the choice among the CPU's algorithms happens inside its kernels). The backward takes
  // grad_out (N, OH, OW, Cout) in any floating dtype, x (defined when dw is wanted) and w (defined
  // when dx is wanted), and returns dx, dw, db in args.dtype; db = grad_out summed over (N, OH, OW).
  Tensor (*conv2d_forward)(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p,
                           std::shared_ptr<void>* saved) = nullptr;
  Conv2dGrads (*conv2d_backward)(const Tensor& grad_out, const Tensor& x, const Tensor& w,
                                 const Conv2dBackwardArgs& args) = nullptr;

  // --- matrix product (core/ops/linear.h): op(a) (M, K) x op(b) (K, N) [+ bias (N)] -> (M, N), op =
  // transpose where the flag is set (a is then (K, M)); a transposed operand is read in place, never
  // copied. a, b, bias 2-D/1-D of one dtype (f32, bf16, f16), f32 accumulation, result in that dtype;
  // K = 0 gives zeros (plus the bias). Shapes checked by the op.
  Tensor (*matmul)(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& bias) = nullptr;

  // --- batch norm (core/ops/batch_norm.h), channels last: x is M rows of C channels; the op checks
  // shapes. gamma, beta (C) may be undefined (1 and 0); running_mean/var (C) may be undefined in
  // training only. Statistics in f32 (f64 on the CPU for f64 x), eps inside the square root.
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
  Tensor (*batch_norm_forward)(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, bool training, double momentum, double eps,
                               Tensor* save_mean, Tensor* save_invstd, std::shared_ptr<void>* saved) = nullptr;
  // batch_norm_relu_forward: relu(batch_norm_forward(x, ...) + residual) in one pass over the rows
  //   (residual undefined: relu(batch_norm_forward(...))); residual has x's shape and dtype. The same
  //   bits as the three kernels one after the other (batch_norm_forward, binary add, unary relu:
  //   the sum rounded to x's dtype before the add), the same running-statistics update, and
  //   save_mean/save_invstd/saved for batch_norm_relu_backward. A device may instead compute the three in one library call (cuDNN's BN_ADD_ACTIVATION): its values
  //   then match to rounding, not bit for bit. May be nullptr (with the backward): the op then runs
  //   the three ops.
  // batch_norm_relu_backward: the gradients of batch_norm_relu_forward from grad_out and its output y:
  //   g = relu_backward(grad_out, y), then batch_norm_backward's dx, dgamma, dbeta of g, and
  //   dresidual = g when has_residual. beta is the forward's (cuDNN's fused backward reads it).
  Tensor (*batch_norm_relu_forward)(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& running_mean, const Tensor& running_var, bool training,
                                    double momentum, double eps, const Tensor& residual, Tensor* save_mean,
                                    Tensor* save_invstd, std::shared_ptr<void>* saved) = nullptr;
  BatchNormGradients (*batch_norm_relu_backward)(const Tensor& grad_out, const Tensor& y, const Tensor& x,
                                                 const Tensor& gamma, const Tensor& beta, const Tensor& save_mean,
                                                 const Tensor& save_invstd, const std::shared_ptr<void>& saved,
                                                 bool training, bool need_dx, bool has_residual) = nullptr;
  BatchNormGradients (*batch_norm_backward)(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                            const Tensor& save_mean, const Tensor& save_invstd,
                                            const std::shared_ptr<void>& saved, bool training,
                                            bool need_dx) = nullptr;
  // counter += by for a one-element i64 counter, on its own device without a host read (batch norm's
  // num_batches_tracked, layers/norm.cpp).
  void (*increment_i64)(const Tensor& counter, int64_t by) = nullptr;

  // --- losses (core/ops/loss.h); logits (N, K) floating, N, K > 0; the op checks shapes and dtypes.
  // Returned losses are scalars (shape []) in f32 (f64 on the CPU for f64 logits); gradients are in
  // logits' dtype; grad_loss is a one-element floating tensor on the device.
  // cross_entropy: labels (N) i64/i32, label smoothing e, class_weights (K) or undefined: the mean of
  //   loss_i = (1-e)(lse_i - z_iy) + e mean_k(lse_i - z_ik), or PyTorch's weighted mean (divisor
  //   S = sum_i w[y_i]; loss and gradient 0 when S = 0). A label outside [0, K): an error where the
  //   kernel can throw (CPU), else a NaN loss and gradient row (CUDA). *saved (when not null) receives
  //   the state this device's backward needs besides its other arguments (opaque to the op).
  Tensor (*cross_entropy_forward)(const Tensor& logits, const Tensor& labels, double label_smoothing,
                                  const Tensor& class_weights, Tensor* saved) = nullptr;
  Tensor (*cross_entropy_backward)(const Tensor& grad_loss, const Tensor& logits, const Tensor& labels,
                                   double label_smoothing, const Tensor& class_weights, const Tensor& saved) = nullptr;
  // soft_cross_entropy: targets (N, K) floating; t' = (1-e) t + e/K, loss = (1/N) sum_ik w_k t'_ik (lse_i - z_ik)
  //   (w = 1 without class_weights; divisor N either way); dz = (softmax sum_j w_j t'_ij - w_k t'_ik) / N
  //   times grad_loss. *saved as for cross_entropy.
  Tensor (*soft_cross_entropy_forward)(const Tensor& logits, const Tensor& targets, double label_smoothing,
                                       const Tensor& class_weights, Tensor* saved) = nullptr;
  Tensor (*soft_cross_entropy_backward)(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                        double label_smoothing, const Tensor& class_weights,
                                        const Tensor& saved) = nullptr;
  // softmax over the last dim of (R, K) logits (K > 0), in logits' dtype (computed in f32, f64 for f64).
  Tensor (*softmax)(const Tensor& logits) = nullptr;

  // --- elementwise (core/ops/elementwise.h); the op has checked that the operands are floating and
  // of one dtype. Binary: NumPy's broadcasting, shapes that do not broadcast throw
  // ops::broadcast_shapes's error. Output: the broadcast shape in the inputs' dtype, math in f32
  // (f64 for f64 tensors on the CPU).
  // NaN propagates as in PyTorch: relu(NaN) = NaN; relu_backward(gy, y) = (y <= 0 ? 0 : gy), so a
  // NaN output passes its gradient.
  Tensor (*binary)(ElementwiseBinary op, const Tensor& a, const Tensor& b) = nullptr;
  Tensor (*unary)(ElementwiseUnary op, const Tensor& a) = nullptr;
  // y = x * mul + add, computed in f64 and rounded once to x's dtype (mul_scalar: add = 0,
  // add_scalar: mul = 1; the CPU then leaves the unused term out, so neg(0) = -0).
  Tensor (*affine)(const Tensor& a, double mul, double add) = nullptr;
  // False when any element is inf or NaN (integer tensors: true).
  bool (*all_finite)(const Tensor& a) = nullptr;

  // --- reductions (core/ops/reduce.h): the sum over `dims` (sorted, distinct, in range: the op
  // normalises them), keepdim keeping them as size 1. Output in x's dtype (floating); accumulated in
  // f64 on the CPU, f32 on a GPU. (sum of squares and max |x| are the entries above.)
  Tensor (*sum)(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) = nullptr;

  // --- the trainer's per-step statistics, kept on the device so a step needs no host read
  // (tools/engine/trainer.cpp reads acc at log intervals). acc: 5 f64 on the device, zeroed by the caller;
  // loss: one f32; logits (N, K) floating; labels (N) i64. acc[0] += loss * weight when the loss
  // is finite; acc[1] += the rows whose first maximum is at the label (rows holding NaN: unspecified,
  // the loss is NaN then); acc[2] += 1 when the loss is not finite, and for the first such loss
  // (acc[2] was 0) acc[3] = step, acc[4] = the loss.
  void (*accumulate_step_stats)(const Tensor& acc, const Tensor& loss, const Tensor& logits, const Tensor& labels,
                                double weight, int64_t step) = nullptr;

  // --- memory and runtime of a device other than the CPU (core/tensor.cpp, core/allocator.cpp,
  // core/device.h, core/comm.h); the CPU's memory is the host's, handled in core/ itself, so the
  // CPU's table leaves these null. `index` is the device's index (cuda:1 -> 1).
  // dst = src, any strides, any dtype pair (converted through f64, as the CPU's copy), where one of
  // them is on this device and the other on it, on another device of this kind, or on the CPU.
  void (*copy)(const Tensor& dst, const Tensor& src) = nullptr;
  // Every element of t (any strides) = value, stored as the CPU's store() stores it.
  void (*fill)(const Tensor& t, double value) = nullptr;
  // The device's caching allocator (core/allocator.h); throws when the device does not exist.
  CachingAllocator& (*allocator)(int index) = nullptr;
  std::string (*device_name)(int index) = nullptr;  // "NVIDIA H200"
  // Whether the device has bf16 arithmetic units (a CPU with AVX-512 BF16 or AMX; a GPU of compute
  // capability 8.0 or newer): train.precision = "auto" picks bf16 there.
  bool (*native_bf16)(int index) = nullptr;
  // Waits until the work queued on the device is done; reports its asynchronous errors.
  void (*synchronize)(int index) = nullptr;
  // (free, total) bytes of the device's memory.
  std::pair<size_t, size_t> (*memory_info)(int index) = nullptr;
  // The convolution library's algorithm search (cuDNN's benchmark mode): on, the first call of a
  // shape times the algorithms and keeps the fastest; off, its heuristics choose. Process-wide.
  void (*set_conv_benchmark)(bool on) = nullptr;
  bool (*conv_benchmark)() = nullptr;
  // Marks where an external profiler (ncu --profile-from-start off, nsys --capture-range=cudaProfilerApi)
  // starts and stops recording: cudaProfilerStart/Stop on CUDA. Process-wide.
  void (*profile_range)(bool on) = nullptr;
  // Data-parallel communicators between devices (NCCL): the id rank 0 creates and hands to every
  // rank (opaque bytes); one rank of a communicator across processes (`also`, if given, is kept
  // alive and aborted with it); one communicator per device, all in this process (rank i drives
  // devices[i]).
  std::string (*communicator_id)() = nullptr;
  std::unique_ptr<Communicator> (*make_communicator)(const std::string& id, int nranks, int rank, int index,
                                                     double timeout_s, std::unique_ptr<Communicator> also) = nullptr;
  std::vector<std::unique_ptr<Communicator>> (*make_local_communicators)(const std::vector<int>& indices) = nullptr;
};

// The table of `device` (core/kernels.cpp). A CUDA device in a build without CUDA is an error.
// The argument check both backends' loss_scale_unscale/loss_scale_update start with.
inline void check_loss_scale_state(const char* op, const Tensor& state, const Tensor& found_inf) {
  KILN_CHECK(state.dtype() == DType::f64 && state.numel() == kLossScaleStateSize && state.is_contiguous() &&
                 found_inf.dtype() == DType::i32 && found_inf.numel() == 1 && state.device() == found_inf.device(),
             op, ": state must be f64 (", static_cast<int>(kLossScaleStateSize), ") and found_inf i32 [] on one device, got ",
             state.str(), " and ", found_inf.str());
}

const Kernels& kernels(Device device);

// Entry `field` of `device`'s table, or Error "<op>: no <device> kernel".
template <typename Fn>
Fn kernel(Device device, Fn Kernels::*field, const char* op) {
  const Kernels& k = kernels(device);
  Fn f = k.*field;
  KILN_CHECK(f != nullptr, op, ": no ", k.device, " kernel");
  return f;
}

namespace cpu {
const Kernels& kernels();  // core/cpu/kernels_cpu.cpp
}
namespace cuda {
const Kernels& kernels();  // core/cuda/kernels_cuda.cu (built with CUDA only)
}

}  // namespace kiln
