// The CPU's kernel table (core/kernels.h): the one place that lists the CPU's kernels, each declared
// here and defined in its op's file in core/cpu/, one line per entry.
#include "core/dnnl_context.h"
#include "core/kernels.h"

namespace kiln::cpu {

// core/cpu/adamw.cpp, core/cpu/sgd.cpp
void adamw_step(const std::vector<AdamWStepEntry>& entries, const AdamWStepOptions& options);
void sgd_step(const std::vector<SgdStepEntry>& entries, const SgdStepOptions& options);
// core/cpu/dropout.cpp
Tensor dropout_forward(const Tensor& x, double p, RngState state);
Tensor dropout_backward(const Tensor& grad_out, double p, RngState state);
// core/cpu/grad_utils.cpp
bool scale_and_check_finite(const std::vector<Tensor>& xs, double factor);
void loss_scale_unscale(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf);
void loss_scale_update(const Tensor& state, const Tensor& scale32, const Tensor& found_inf, const LossScaleRule& rule);
double sum_of_squares(const std::vector<Tensor>& xs);
double max_abs(const Tensor& x);
void ema_update(const Tensor& ema, const Tensor& live, float decay);
// core/cpu/lrn.cpp
Tensor lrn_forward(const Tensor& x, int64_t size, double alpha, double beta, double k);
Tensor lrn_backward(const Tensor& grad_out, const Tensor& x, int64_t size, double alpha, double beta, double k);
// core/cpu/pool.cpp
Tensor max_pool2d_forward(const Tensor& x, const ops::Pool2dParams& p, Tensor* indices);
Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Shape& x_shape, const ops::Pool2dParams& p);
Tensor avg_pool2d_forward(const Tensor& x, const ops::Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& gy, const Shape& x_shape, const ops::Pool2dParams& p);
Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t out_h, int64_t out_w);
Tensor adaptive_avg_pool2d_backward(const Tensor& gy, const Shape& x_shape);
Tensor global_avg_pool_forward(const Tensor& x);
Tensor global_avg_pool_backward(const Tensor& gy, const Shape& x_shape);
// core/cpu/silu.cpp
Tensor silu_forward(const Tensor& x);
Tensor silu_backward(const Tensor& grad_out, const Tensor& x);

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

const Kernels& kernels() {
  static const Kernels table = [] {
    Kernels k;
    k.device = "cpu";
    k.native_bf16 = [](int) { return onednn::bf16_units(); };
    k.dropout_forward = dropout_forward;
    k.dropout_backward = dropout_backward;
    k.silu_forward = silu_forward;
    k.silu_backward = silu_backward;
    k.lrn_forward = lrn_forward;
    k.lrn_backward = lrn_backward;
    k.max_pool2d_forward = max_pool2d_forward;
    k.max_pool2d_backward = max_pool2d_backward;
    k.avg_pool2d_forward = avg_pool2d_forward;
    k.avg_pool2d_backward = avg_pool2d_backward;
    k.adaptive_avg_pool2d_forward = adaptive_avg_pool2d_forward;
    k.adaptive_avg_pool2d_backward = adaptive_avg_pool2d_backward;
    k.global_avg_pool_forward = global_avg_pool_forward;
    k.global_avg_pool_backward = global_avg_pool_backward;
    k.sgd_step = sgd_step;
    k.adamw_step = adamw_step;
    k.scale_and_check_finite = scale_and_check_finite;
    k.loss_scale_unscale = loss_scale_unscale;
    k.loss_scale_update = loss_scale_update;
    k.sum_of_squares = sum_of_squares;
    k.max_abs = max_abs;
    k.ema_update = ema_update;

    k.conv2d_forward = conv2d_forward;
    k.conv2d_backward = conv2d_backward;
    k.matmul = matmul;

    k.batch_norm_forward = batch_norm_forward;
    k.batch_norm_relu_forward = batch_norm_relu_forward;
    k.batch_norm_backward = batch_norm_backward;
    k.batch_norm_relu_backward = batch_norm_relu_backward;
    k.increment_i64 = increment_i64;
    k.cross_entropy_forward = cross_entropy_forward;
    k.cross_entropy_backward = cross_entropy_backward;
    k.soft_cross_entropy_forward = soft_cross_entropy_forward;
    k.soft_cross_entropy_backward = soft_cross_entropy_backward;
    k.softmax = softmax;

    k.binary = binary;
    k.unary = unary;
    k.affine = affine;
    k.all_finite = all_finite;
    k.sum = sum;
    k.accumulate_step_stats = accumulate_step_stats;
    return k;
  }();
  return table;
}

}  // namespace kiln::cpu
