// The CPU's kernel registration (core/kernel_slot.h): the one place that lists the CPU's kernels,
// each declared here and defined in its op's file in core/cpu/, one line per kernel in
// register_kernels(). The slots are declared with their ops (core/ops/*.h), the device services
// (core/device.h) and the optimizer steps, gradient utilities and step statistics
// (core/optim_kernels.h, core/step_stats.h). Tests: tests/core/silu_test.cpp (KernelSlot.*).
#include "core/dnnl_context.h"
#include "core/kernel_slot.h"
#include "core/ops/batch_norm.h"
#include "core/ops/conv2d.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/loss.h"
#include "core/ops/lrn.h"
#include "core/ops/normalize_u8.h"
#include "core/ops/pool.h"
#include "core/ops/reduce.h"
#include "core/ops/scale_add_relu.h"
#include "core/ops/silu.h"
#include "core/ops/bn_finalize.h"
#include "core/ops/channel_moments.h"
#include "core/optim_kernels.h"
#include "core/step_stats.h"

namespace kiln::cpu {

// core/cpu/adamw.cpp, core/cpu/sgd.cpp, core/cpu/lars.cpp
void adamw_step(const std::vector<AdamWStepEntry>& entries, const AdamWStepOptions& options);
void sgd_step(const std::vector<SgdStepEntry>& entries, const SgdStepOptions& options);
void lars_step(const std::vector<LarsStepEntry>& entries, const LarsStepOptions& options);
// core/cpu/dropout.cpp
Tensor dropout_forward(const Tensor& x, double p, RngState state);
Tensor dropout_backward(const Tensor& grad_out, double p, RngState state);
// core/cpu/grad_utils.cpp
bool scale_and_check_finite(const std::vector<Tensor>& xs, double factor);
void loss_scale_unscale(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf);
void loss_scale_update(const Tensor& state, const Tensor& scale32, const Tensor& found_inf, const LossScaleRule& rule);
double sum_of_squares(const std::vector<Tensor>& xs);
double max_abs(const Tensor& x);
void ema_update(const Tensor& ema, const Tensor& live, float decay, const Tensor& skip);
void ema_copy(const Tensor& dst, const Tensor& src, const Tensor& skip);
// core/cpu/lrn.cpp
Tensor lrn_forward(const Tensor& x, int64_t size, double alpha, double beta, double k);
Tensor lrn_backward(const Tensor& grad_out, const Tensor& x, int64_t size, double alpha, double beta, double k);
// core/cpu/normalize_u8.cpp
Tensor normalize_u8(const Tensor& x, const NormalizeU8Params& p, DType out);
// core/cpu/pool.cpp
Tensor max_pool2d_forward(const Tensor& x, const ops::Pool2dParams& p, Tensor* indices);
Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Shape& x_shape, const ops::Pool2dParams& p);
Tensor avg_pool2d_forward(const Tensor& x, const ops::Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& gy, const Shape& x_shape, const ops::Pool2dParams& p);
Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t out_h, int64_t out_w);
Tensor adaptive_avg_pool2d_backward(const Tensor& gy, const Shape& x_shape);
Tensor global_avg_pool_forward(const Tensor& x);
Tensor global_avg_pool_backward(const Tensor& gy, const Shape& x_shape);
// core/cpu/scale_add_relu.cpp
Tensor scale_add_relu_forward(const Tensor& x, const Tensor& scale, const Tensor& residual);
ScaleAddReluGrads scale_add_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x, const Tensor& scale);
// core/cpu/silu.cpp
Tensor silu_forward(const Tensor& x);
Tensor silu_backward(const Tensor& grad_out, const Tensor& x);
// core/cpu/bn_finalize.cpp
BnFinalizeForward bn_finalize_forward(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma,
                                      const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                      double momentum, double eps, DType out);
Tensor bn_finalize_backward(const Tensor& grad, const Tensor& saved, const Tensor& gamma, int64_t count);
// core/cpu/channel_moments.cpp
Tensor channel_moments_backward(const Tensor& y, const Tensor& g_sum, const Tensor& g_sumsq);

// core/cpu/conv2d.cpp, core/cpu/linear.cpp
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p,
                      std::shared_ptr<void>* saved);
Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& w, const Conv2dBackwardArgs& args);
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& bias);

// core/cpu/batch_norm.cpp
Tensor batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                          const Tensor& running_var, bool training, double momentum, double eps, Tensor* save_mean,
                          Tensor* save_invstd, std::shared_ptr<void>* saved);
Tensor batch_norm_relu_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, bool training, double momentum, double eps,
                               const Tensor& residual, Tensor* save_mean, Tensor* save_invstd,
                               std::shared_ptr<void>* saved);
BatchNormGradients batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                       const Tensor& save_mean, const Tensor& save_invstd,
                                       const std::shared_ptr<void>& saved, bool training, bool need_dx);
BatchNormGradients batch_norm_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x,
                                            const Tensor& gamma, const Tensor& beta, const Tensor& save_mean,
                                            const Tensor& save_invstd, const std::shared_ptr<void>& saved,
                                            bool training, bool need_dx, bool has_residual);
void increment_i64(const Tensor& counter, int64_t by);
// core/cpu/loss.cpp
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& labels, double label_smoothing,
                             const Tensor& class_weights, Tensor* saved);
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& labels,
                              double label_smoothing, const Tensor& class_weights, const Tensor& saved);
Tensor soft_cross_entropy_forward(const Tensor& logits, const Tensor& targets, double label_smoothing,
                                  const Tensor& class_weights, Tensor* saved);
Tensor soft_cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                   double label_smoothing, const Tensor& class_weights, const Tensor& saved);
Tensor softmax(const Tensor& logits);

// core/cpu/elementwise.cpp
Tensor binary(ElementwiseBinary op, const Tensor& a, const Tensor& b);
Tensor unary(ElementwiseUnary op, const Tensor& a);
Tensor affine(const Tensor& a, double mul, double add);
bool all_finite(const Tensor& a);
// core/cpu/reduce.cpp
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
// core/cpu/step_stats.cpp
void accumulate_step_stats(const Tensor& acc, const Tensor& loss, const Tensor& logits, const Tensor& labels,
                           double weight, int64_t step);

void register_kernels() {
  constexpr DeviceType cpu = DeviceType::CPU;
  native_bf16_kernel.set(cpu, [](int) { return onednn::bf16_units(); });
  dropout_forward_kernel.set(cpu, dropout_forward);
  dropout_backward_kernel.set(cpu, dropout_backward);
  scale_add_relu_forward_kernel.set(cpu, scale_add_relu_forward);
  scale_add_relu_backward_kernel.set(cpu, scale_add_relu_backward);
  silu_forward_kernel.set(cpu, silu_forward);
  silu_backward_kernel.set(cpu, silu_backward);
  channel_moments_backward_kernel.set(cpu, channel_moments_backward);
  bn_finalize_forward_kernel.set(cpu, bn_finalize_forward);
  bn_finalize_backward_kernel.set(cpu, bn_finalize_backward);
  lrn_forward_kernel.set(cpu, lrn_forward);
  lrn_backward_kernel.set(cpu, lrn_backward);
  normalize_u8_kernel.set(cpu, normalize_u8);
  max_pool2d_forward_kernel.set(cpu, max_pool2d_forward);
  max_pool2d_backward_kernel.set(cpu, max_pool2d_backward);
  avg_pool2d_forward_kernel.set(cpu, avg_pool2d_forward);
  avg_pool2d_backward_kernel.set(cpu, avg_pool2d_backward);
  adaptive_avg_pool2d_forward_kernel.set(cpu, adaptive_avg_pool2d_forward);
  adaptive_avg_pool2d_backward_kernel.set(cpu, adaptive_avg_pool2d_backward);
  global_avg_pool_forward_kernel.set(cpu, global_avg_pool_forward);
  global_avg_pool_backward_kernel.set(cpu, global_avg_pool_backward);
  sgd_step_kernel.set(cpu, sgd_step);
  adamw_step_kernel.set(cpu, adamw_step);
  lars_step_kernel.set(cpu, lars_step);
  scale_and_check_finite_kernel.set(cpu, scale_and_check_finite);
  loss_scale_unscale_kernel.set(cpu, loss_scale_unscale);
  loss_scale_update_kernel.set(cpu, loss_scale_update);
  sum_of_squares_kernel.set(cpu, sum_of_squares);
  max_abs_kernel.set(cpu, max_abs);
  ema_update_kernel.set(cpu, ema_update);
  ema_copy_kernel.set(cpu, ema_copy);

  conv2d_forward_kernel.set(cpu, conv2d_forward);
  conv2d_backward_kernel.set(cpu, conv2d_backward);
  matmul_kernel.set(cpu, matmul);

  batch_norm_forward_kernel.set(cpu, batch_norm_forward);
  batch_norm_relu_forward_kernel.set(cpu, batch_norm_relu_forward);
  batch_norm_backward_kernel.set(cpu, batch_norm_backward);
  batch_norm_relu_backward_kernel.set(cpu, batch_norm_relu_backward);
  increment_i64_kernel.set(cpu, increment_i64);
  cross_entropy_forward_kernel.set(cpu, cross_entropy_forward);
  cross_entropy_backward_kernel.set(cpu, cross_entropy_backward);
  soft_cross_entropy_forward_kernel.set(cpu, soft_cross_entropy_forward);
  soft_cross_entropy_backward_kernel.set(cpu, soft_cross_entropy_backward);
  softmax_kernel.set(cpu, softmax);

  binary_kernel.set(cpu, binary);
  unary_kernel.set(cpu, unary);
  affine_kernel.set(cpu, affine);
  all_finite_kernel.set(cpu, all_finite);
  sum_kernel.set(cpu, sum);
  accumulate_step_stats_kernel.set(cpu, accumulate_step_stats);
}

}  // namespace kiln::cpu
