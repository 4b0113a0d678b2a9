// The CUDA backend's kernels as plain functions on CUDA tensors: forward and backward separately,
// no autograd (the public ops in core/ops/ record the graph and call these when a tensor is on a GPU).
// Only plain C++ types here, so any .cpp may include it under #ifdef KILN_WITH_CUDA.
//
// Common rules (every function):
//   - Inputs must be CUDA tensors on one device; outputs are new contiguous tensors on that device.
//   - Floating math runs in f32 (f16/bf16 values are widened and the result rounded once), storage
//     dtypes f32, f16, bf16; a bad dtype, device or shape throws kiln::Error naming the function.
//   - Any strides are accepted (non-contiguous inputs are packed first).
//   - Work is queued on the device's compute stream; functions that return a host value (bool,
//     double) wait for it, the others return at once.
//   - 4-D activations are NHWC, conv weights (Cout, KH, KW, Cin/groups).
// Tests: tests/gpu/*.cpp (each kernel against a CPU reference written in the test).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/batch_norm.h"
#include "core/ops/conv2d.h"
#include "core/ops/elementwise.h"
#include "core/ops/pool.h"
#include "core/optim_kernels.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace kiln {
class CachingAllocator;
// (free, total) bytes of memory on CUDA device `device` (cudaMemGetInfo).
std::pair<size_t, size_t> cuda_mem_get_info(int device);
// The kernels of core/tensor.h's copy and fill slots (core/cuda/copy_cuda.cu): dst = src where
// either is on a GPU (any strides and dtypes), and fill of a GPU tensor.
void copy_tensor_cuda(const Tensor& dst, const Tensor& src);
void fill_cuda(const Tensor& t, double value);
// The caching allocator of cuda:`index` (core/cuda/allocator_cuda.cu): core/allocator.h's slot.
CachingAllocator& cuda_allocator(int index);
}  // namespace kiln

namespace kiln::cuda {

// --- runtime and settings --------------------------------------------------------------------------
void synchronize(int device);  // waits until the device's stream is idle; reports async errors
std::string device_name(int device);
std::string versions();  // "CUDA runtime 13.0, driver 13.0, cuDNN 9.19.0, cuBLASLt 130100, NCCL 2.28.3"
// cuDNN benchmark mode: the first call of each conv shape times every algorithm (cudnnFind*) and
// caches the fastest. Default off: cuDNN's heuristics choose (cached per shape too).
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();
// TF32 tensor-core math for f32 data. Defaults as in PyTorch: on for convolutions, off for matmul.
void set_conv_allow_tf32(bool on);
bool conv_allow_tf32();
void set_matmul_allow_tf32(bool on);
bool matmul_allow_tf32();
// Largest workspace a convolution algorithm may use (default 1 GiB).
void set_conv_workspace_limit(size_t bytes);
size_t conv_workspace_limit();

// counter += by, for a one-element i64 counter on the device (batch norm's num_batches_tracked):
// queued like a kernel, no sync (core/cuda/copy_cuda.cu).
void increment(const Tensor& counter, int64_t by = 1);

// --- elementwise (core/cuda/elementwise_cuda.cu) ----------------------------------------------------
enum class BinaryOp { add, sub, mul, div };
// NumPy broadcasting; a and b have the same floating dtype; the result has that dtype.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
enum class UnaryOp { neg, relu, exp, log, sqrt, square };
Tensor unary(UnaryOp op, const Tensor& a);
// a * mul + add (add_scalar: mul = 1; mul_scalar: add = 0).
Tensor affine(const Tensor& a, double mul, double add);
// grad_out where out > 0, else 0 (out is relu's output; same shapes and dtypes).
Tensor relu_backward(const Tensor& grad_out, const Tensor& out);
// True when no element is inf or NaN.
bool all_finite(const Tensor& a);

// --- reductions (core/cuda/reduce_cuda.cu) ----------------------------------------------------------
// Sums over `dims` (negative allowed, duplicates ignored, empty list = no reduction); f32 accumulation,
// result in x's dtype. Reducing dims {0, 1, 2} of an NHWC tensor is the bias gradient (per channel).
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
double sum_of_squares(const Tensor& x);
double max_abs(const Tensor& x);

// --- loss (core/cuda/loss_cuda.cu) ------------------------------------------------------------------
// logits (N, K) f32/f16/bf16, labels (N) i64 or i32; label smoothing e: target (1-e)*onehot + e/K.
// Returns the mean loss as an f32 scalar (shape []). A label outside [0, K) makes the loss NaN
// (and its gradient row NaN) instead of failing on the device.
// With class_weights ((K) floating, same device): PyTorch's weighted mean (core/ops/loss.h), and
// *weight_sum (if given) receives sum_i w[y_i] as an f32 scalar on the device, for the backward.
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& labels, double label_smoothing,
                             const Tensor& class_weights = Tensor(), Tensor* weight_sum = nullptr);
// grad_loss: scalar (any floating dtype) on the same device. Returns dL/dlogits in logits' dtype:
// grad_loss/N * (softmax(logits) - target); weighted (class_weights and the forward's weight_sum):
// grad_loss/S * ((1-e) w_y (softmax - onehot) + (e/K) (W softmax - w)), zero where S = 0.
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& labels,
                              double label_smoothing, const Tensor& class_weights = Tensor(),
                              const Tensor& weight_sum = Tensor());
// Probability targets (core/ops/loss.h soft_cross_entropy): targets (N, K) floating, same device;
// t' = (1-e) t + e/K, loss = (1/N) sum_i sum_k w_k t'_ik (lse_i - z_ik) as an f32 scalar (w = 1 without
// class_weights; the divisor is N either way, PyTorch's definition for probability targets).
Tensor soft_cross_entropy_forward(const Tensor& logits, const Tensor& targets, double label_smoothing,
                                  const Tensor& class_weights = Tensor());
// dL/dlogits in logits' dtype: grad_loss/N * (softmax * sum_j w_j t'_ij - w_k t'_ik).
Tensor soft_cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                   double label_smoothing, const Tensor& class_weights = Tensor());
// Row-wise softmax of (N, K) logits, in logits' dtype.
Tensor softmax(const Tensor& logits);
// A training step's statistics accumulated on the device, so the step needs no host read
// (tools/engine/trainer.cpp reads `acc` at log intervals). acc: 5 f64 values on the device, zeroed by the
// caller: [0] += loss * weight when the loss is finite; [1] += rows of `logits` (N, K) whose first
// maximum is at `labels` (N, i64); [2] += 1 when the loss is not finite; [3] = `step` and [4] = the
// loss, for the first non-finite loss (while [2] was 0). loss: an f32 scalar on the device.
void accumulate_step_stats(const Tensor& acc, const Tensor& loss, const Tensor& logits, const Tensor& labels,
                           double weight, int64_t step);

// --- dropout (core/cuda/dropout_cuda.cu) ------------------------------------------------------------
// Element i (row-major logical index) is kept iff uniform_at(state, i) >= float(p), and kept values
// are scaled by float(1 / (1 - p)): the CPU formula from core/rng.h, so masks are identical on every
// device. `state` is what Generator::advance(numel) returned. p in [0, 1).
Tensor dropout_forward(const Tensor& x, double p, RngState state);
Tensor dropout_backward(const Tensor& grad_out, double p, RngState state);

// --- matmul (core/cuda/matmul_cuda.cu, cuBLASLt) ----------------------------------------------------
// op(a) (M, K) x op(b) (K, N) -> (M, N), op = transpose when the flag is set (a is then (K, M)).
// a, b same dtype (f32, f16, bf16; f32 accumulation); optional bias (N) of that dtype is added.
// Linear: y = matmul(x, w, false, true, b); dx = matmul(gy, w, false, false); dw = matmul(gy, x, true, false).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              const Tensor& bias = Tensor());
// How a matmul problem runs, chosen once per shape and cached: cuBLASLt with the bias epilogue;
// cuBLASLt without it (the bias added by a separate kernel) when the heuristic has no algorithm with
// the epilogue; cublasGemmEx (+ bias kernel) when cuBLASLt has none at all or its algorithm reports
// itself unsupported at run time (tiny and odd shapes, e.g. 1x1x1 with a bias, unaligned operands).
enum class MatmulPath { lt_epilogue, lt_then_bias, gemm_ex };
// The path the last matmul() on `device` took (tests).
MatmulPath last_matmul_path(int device);
// Tests: start every new problem from `first` instead of lt_epilogue (lt_epilogue restores the
// normal behaviour); plans cached under another start are not reused.
void set_matmul_first_path(MatmulPath first);

// --- convolution (core/cuda/conv2d_cuda.cu, cuDNN) --------------------------------------------------
// x (N, H, W, Cin), w (Cout, KH, KW, Cin/groups) of x's dtype, b (Cout) or undefined -> (N, OH, OW, Cout).
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p);
// dL/dx of shape x_shape from gy (N, OH, OW, Cout).
Tensor conv2d_backward_data(const Tensor& gy, const Tensor& w, const Shape& x_shape, const ops::Conv2dParams& p);
// dL/dw of shape w_shape (dtype of x). The bias gradient is sum(gy, {0, 1, 2}).
Tensor conv2d_backward_weight(const Tensor& gy, const Tensor& x, const Shape& w_shape, const ops::Conv2dParams& p);

// --- batch norm (core/cuda/batch_norm_cuda.cu) ------------------------------------------------------
// x: (..., C) channels last (NHWC or (N, C)); gamma, beta, running stats: (C) f32 (gamma/beta may be
// undefined: 1 and 0). Statistics in f32; eps inside the square root.
// Training: normalises with the batch mean and biased variance, updates running_mean/var in place
// (if defined) with running = (1-momentum)*running + momentum*batch, the variance unbiased
// (n/(n-1)); writes save_mean and save_invstd (C, f32) for the backward.
Tensor batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                                const Tensor& running_var, double momentum, double eps, Tensor* save_mean,
                                Tensor* save_invstd);
// Eval: normalises with the running statistics.
Tensor batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, double eps);
struct BatchNormGrads {
  Tensor dx, dgamma, dbeta;  // dgamma/dbeta f32 (C); undefined when gamma is undefined
};
BatchNormGrads batch_norm_backward_train(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                         const Tensor& save_mean, const Tensor& save_invstd);
BatchNormGrads batch_norm_backward_eval(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                        const Tensor& running_mean, const Tensor& running_var, double eps);
// The registered training batch norm runs on cuDNN for f32/f16/bf16 (N, H, W, C) x (where cuDNN takes it) when this is on
// (default; KILN_CUDNN_BATCH_NORM=0 in the environment starts it off); off, on the kernels above.
// Process-wide. The functions above always run kiln's own kernels.
void set_batch_norm_cudnn(bool on);
bool batch_norm_cudnn();
// Whether a batch_norm_relu_forward's `saved` handle comes from cuDNN's fused BN_ACTIVATION /
// BN_ADD_ACTIVATION call (tests and the GPU check report which path ran).
bool batch_norm_saved_is_fused(const std::shared_ptr<void>& saved);

// --- pooling (core/cuda/pool_cuda.cu) ---------------------------------------------------------------
// PyTorch's semantics: output size with ceil_mode (a window may not start in the right padding),
// max pooling ignores padding (NaN propagates, first maximum wins), avg pooling divides by the window
// clipped to the padded input (count_include_pad) or by the valid elements. pad <= kernel/2.
Shape pool2d_output_shape(const Shape& x, const ops::Pool2dParams& p);
// indices (if not null) receives, per output element, the argmax as h*W + w in its image (i32).
Tensor max_pool2d_forward(const Tensor& x, const ops::Pool2dParams& p, Tensor* indices);
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& x_shape,
                           const ops::Pool2dParams& p);
Tensor avg_pool2d_forward(const Tensor& x, const ops::Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, const ops::Pool2dParams& p);
// (N, H, W, C) -> (N, C) and back.
Tensor global_avg_pool_forward(const Tensor& x);
Tensor global_avg_pool_backward(const Tensor& grad_out, const Shape& x_shape);
// PyTorch's adaptive bins: start = floor(i*H/OH), end = ceil((i+1)*H/OH).
Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t out_h, int64_t out_w);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape);

// --- local response norm (core/cuda/lrn_cuda.cu) ----------------------------------------------------
// Across the last (channel) dim, PyTorch's window: size/2 channels before, (size-1)/2 after.
Tensor lrn_forward(const Tensor& x, int64_t size, double alpha, double beta, double k);
Tensor lrn_backward(const Tensor& grad_out, const Tensor& x, int64_t size, double alpha, double beta, double k);

// --- optimizers and loss scaling (core/cuda/optim_cuda.cu): one kernel launch for all tensors -------
// param, buffers f32; grad f32, f16 or bf16 of the param's shape; all on one device. The entries
// are core/optim_kernels.h's.
using SgdEntry = SgdStepEntry;
using SgdOptions = SgdStepOptions;
// PyTorch's SGD: g += wd*p; buf = m*buf + (1-dampening)*g; g = nesterov ? g + m*buf : buf; p -= lr*g.
void sgd_step(const std::vector<SgdEntry>& entries, const SgdOptions& opt);
using AdamWEntry = AdamWStepEntry;
using AdamWOptions = AdamWStepOptions;
// PyTorch's AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
void adamw_step(const std::vector<AdamWEntry>& entries, const AdamWOptions& opt);
using LarsEntry = LarsStepEntry;
using LarsOptions = LarsStepOptions;
// LARS (core/optim_kernels.h): per-tensor norms and trust ratios computed on the device, then the
// momentum step scaled by them; three launches, nothing read back.
void lars_step(const std::vector<LarsEntry>& entries, const LarsOptions& opt);
// dst = values (packed f32), the values as kernel arguments: queued, no host wait (core/optim_kernels.h).
void write_values(const Tensor& dst, const std::vector<float>& values);
// Gradient-norm clipping decided on the device (core/optim_kernels.h): nothing read back.
void clip_grad_norm_on_device(const std::vector<Tensor>& grads, double max_norm);
// Loss scaler: multiplies every gradient by inv_scale in place; returns false if any element (before
// or after scaling) is inf or NaN.
bool unscale_and_check_finite(const std::vector<Tensor>& grads, double inv_scale);
// The loss scaler kept on the device (core/optim_kernels.h: loss_scale_unscale, loss_scale_update): one
// multi-tensor launch and a one-thread update; neither reads anything back.
void loss_scale_unscale(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf);
void loss_scale_update(const Tensor& state, const Tensor& scale32, const Tensor& found_inf, const LossScaleRule& rule);
// Sum of squares over all elements of all tensors (gradient-norm clipping), accumulated in f64
// across blocks.
double sum_of_squares(const std::vector<Tensor>& xs);

}  // namespace kiln::cuda
