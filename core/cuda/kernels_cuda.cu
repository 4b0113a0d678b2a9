// The CUDA backend's kernel table (core/kernels.h): the one place that lists its kernels, one line
// per entry. Kernels not declared in cuda_ops.h are declared here and defined in their op's .cu file.
#include <cuda_profiler_api.h>

#include "core/cuda/cuda_ops.h"
#include "core/cuda/runtime.h"
#include "core/kernels.h"

namespace kiln::cuda {

// core/cuda/ema_cuda.cu
void ema_update(const Tensor& ema, const Tensor& live, float decay);
// core/cuda/silu_cuda.cu
Tensor silu_forward(const Tensor& x);
Tensor silu_backward(const Tensor& grad_out, const Tensor& x);

// core/cuda/conv2d_cuda.cu: conv2d_backward_data, conv2d_backward_weight and the bias gradient in one entry
Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& w, const Conv2dBackwardArgs& args);

// core/cuda/batch_norm_cuda.cu (the table's entries: train and eval, the forward's statistics saved)
Tensor batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                          const Tensor& running_var, bool training, double momentum, double eps, Tensor* save_mean,
                          Tensor* save_invstd, std::shared_ptr<void>* saved);
kiln::BatchNormGradients batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                             const Tensor& save_mean, const Tensor& save_invstd,
                                             const std::shared_ptr<void>& saved, bool training, bool need_dx);
Tensor batch_norm_relu_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, bool training, double momentum, double eps,
                               const Tensor& residual, Tensor* save_mean, Tensor* save_invstd,
                               std::shared_ptr<void>* saved);
kiln::BatchNormGradients batch_norm_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x,
                                                  const Tensor& gamma, const Tensor& beta, const Tensor& save_mean,
                                                  const Tensor& save_invstd, const std::shared_ptr<void>& saved,
                                                  bool training, bool need_dx, bool has_residual);

// core/cuda/elementwise_cuda.cu
Tensor elementwise_binary(ElementwiseBinary op, const Tensor& a, const Tensor& b);
Tensor elementwise_unary(ElementwiseUnary op, const Tensor& a);
// core/cuda/nccl_communicator.cu
std::string communicator_id();
std::unique_ptr<Communicator> make_communicator(const std::string& id, int nranks, int rank, int device,
                                               double timeout_s, std::unique_ptr<Communicator> also);
std::vector<std::unique_ptr<Communicator>> make_local_communicators(const std::vector<int>& devices);

const Kernels& kernels() {
  static const Kernels table = [] {
    Kernels k;
    k.device = "cuda";
    k.dropout_forward = dropout_forward;
    k.dropout_backward = dropout_backward;
    k.silu_forward = silu_forward;
    k.silu_backward = silu_backward;
    k.lrn_forward = lrn_forward;
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
    k.scale_and_check_finite = unscale_and_check_finite;  // same contract: x *= factor, all finite
    k.loss_scale_unscale = loss_scale_unscale;
    k.loss_scale_update = loss_scale_update;
    k.sum_of_squares = [](const std::vector<Tensor>& xs) { return sum_of_squares(xs); };
    k.max_abs = max_abs;
    k.ema_update = ema_update;

    // cuDNN keeps no state between the passes: the `saved` handle stays null
    k.conv2d_forward = [](const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p,
                          std::shared_ptr<void>*) { return conv2d_forward(x, w, b, p); };
    k.conv2d_backward = conv2d_backward;
    k.matmul = matmul;

    k.batch_norm_forward = batch_norm_forward;
    k.batch_norm_backward = batch_norm_backward;
    k.batch_norm_relu_forward = batch_norm_relu_forward;
    k.batch_norm_relu_backward = batch_norm_relu_backward;
    k.increment_i64 = increment;  // core/cuda/copy_cuda.cu
    // cross_entropy's saved state is the weight sum of the weighted loss (undefined without weights)
    k.cross_entropy_forward = cross_entropy_forward;
    k.cross_entropy_backward = cross_entropy_backward;
    // soft_cross_entropy keeps no saved state: its backward recomputes from the logits and targets
    k.soft_cross_entropy_forward = [](const Tensor& logits, const Tensor& targets, double e, const Tensor& w,
                                      Tensor* /*saved*/) { return soft_cross_entropy_forward(logits, targets, e, w); };
    k.soft_cross_entropy_backward = [](const Tensor& gl, const Tensor& logits, const Tensor& targets, double e,
                                       const Tensor& w, const Tensor& /*saved*/) {
      return soft_cross_entropy_backward(gl, logits, targets, e, w);
    };
    k.softmax = softmax;

    k.binary = elementwise_binary;
    k.unary = elementwise_unary;
    k.affine = affine;
    k.all_finite = all_finite;
    k.sum = sum;
    k.accumulate_step_stats = accumulate_step_stats;
    k.copy = copy_tensor_cuda;
    k.fill = fill_cuda;
    k.allocator = cuda_allocator;
    k.device_name = device_name;
    k.native_bf16 = [](int index) { return context(index).cc_major >= 8; };
    k.synchronize = synchronize;
    k.memory_info = cuda_mem_get_info;
    k.set_conv_benchmark = set_cudnn_benchmark;
    k.conv_benchmark = cudnn_benchmark;
    k.profile_range = [](bool on) { CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop()); };
    k.communicator_id = communicator_id;
    k.make_communicator = make_communicator;
    k.make_local_communicators = make_local_communicators;
    // cuda::lrn_backward takes grad_out in x's dtype
    k.lrn_backward = [](const Tensor& gy, const Tensor& x, int64_t size, double alpha, double beta, double kk) {
      return lrn_backward(gy.dtype() == x.dtype() ? gy : gy.to(x.dtype()), x, size, alpha, beta, kk);
    };
    return k;
  }();
  return table;
}

}  // namespace kiln::cuda
