// The CUDA backend's kernel registration (core/kernel_slot.h): the one place that lists its
// kernels, one line per kernel in register_kernels(). Kernels not declared in cuda_ops.h or
// runtime.h are declared here and defined in their op's .cu file. Tests: tests/gpu/*.cpp.
#include <cuda_profiler_api.h>

#include "core/allocator.h"
#include "core/comm.h"
#include "core/cuda/cuda_ops.h"
#include "core/cuda/runtime.h"
#include "core/device.h"
#include "core/kernel_slot.h"
#include "core/ops/batch_norm.h"
#include "core/ops/conv2d.h"
#include "core/ops/conv_fusion.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/loss.h"
#include "core/ops/lrn.h"
#include "core/ops/normalize_u8.h"
#include "core/ops/pool.h"
#include "core/ops/reduce.h"
#include "core/ops/silu.h"
#include "core/ops/bn_finalize.h"
#include "core/ops/channel_moments.h"
#include "core/optim_kernels.h"
#include "core/pinned.h"
#include "core/step_stats.h"

namespace kiln::cuda {

// core/cuda/ema_cuda.cu
void ema_update(const Tensor& ema, const Tensor& live, float decay, const Tensor& skip);
void ema_copy(const Tensor& dst, const Tensor& src, const Tensor& skip);
// core/cuda/normalize_u8_cuda.cu
Tensor normalize_u8(const Tensor& x, const NormalizeU8Params& p, DType out);
// core/cuda/silu_cuda.cu
Tensor silu_forward(const Tensor& x);
Tensor silu_backward(const Tensor& grad_out, const Tensor& x);
// core/cuda/bn_finalize_cuda.cu
BnFinalizeForward bn_finalize_forward(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma,
                                      const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                      double momentum, double eps, DType out);
Tensor bn_finalize_backward(const Tensor& grad, const Tensor& saved, const Tensor& gamma, int64_t count);
// core/cuda/channel_moments_cuda.cu
Tensor channel_moments_backward(const Tensor& y, const Tensor& g_sum, const Tensor& g_sumsq);

// core/cuda/conv_fusion_cuda.cu: cuDNN's fused scale-bias-ReLU-conv-genstats, or the op's unfused chain
ops::ConvBnStats conv_bn_stats_forward(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& w,
                                       const ops::Conv2dParams& p, const ConvFusionUnfused& unfused,
                                       ops::ConvFusionChoice* how);
// ... and its backward: cuDNN's fused wgrad (scale-bias-ReLU prologue) and dgrad + dReLU graphs, or the unfused ops
ops::ConvBnGrads conv_bn_stats_backward(const Tensor& gy, const Tensor& x, const Tensor& scale, const Tensor& bias,
                                        const Tensor& w, const ops::Conv2dParams& p, const ops::ConvFusionNeeds& need,
                                        const ConvFusionBackwardUnfused& unfused, ops::ConvFusionBackwardChoice* how);

// core/cuda/conv2d_cuda.cu: conv2d_backward_data, conv2d_backward_weight and the bias gradient in one entry
Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& w, const Conv2dBackwardArgs& args);

// core/cuda/batch_norm_cuda.cu (the registered kernels: train and eval, the forward's statistics saved)
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

namespace {

// The optimizers' fused steps, the loss scaler's and the gradient utilities (core/optim_kernels.h).
void register_optimizer_kernels() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  sgd_step_kernel.set(gpu, sgd_step);
  adamw_step_kernel.set(gpu, adamw_step);
  lars_step_kernel.set(gpu, lars_step);
  scale_and_check_finite_kernel.set(gpu, unscale_and_check_finite);  // same contract: x *= factor, all finite
  loss_scale_unscale_kernel.set(gpu, loss_scale_unscale);
  loss_scale_update_kernel.set(gpu, loss_scale_update);
  sum_of_squares_kernel.set(gpu, [](const std::vector<Tensor>& xs) { return sum_of_squares(xs); });
  max_abs_kernel.set(gpu, max_abs);
  ema_update_kernel.set(gpu, ema_update);
  ema_copy_kernel.set(gpu, ema_copy);
  write_values_kernel.set(gpu, write_values);
  clip_grad_norm_on_device_kernel.set(gpu, clip_grad_norm_on_device);
}

// Copies, fill, the allocator, the device's questions, communicators, pinned memory and graph capture.
void register_device_kernels() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  copy_kernel.set(gpu, copy_tensor_cuda);
  fill_kernel.set(gpu, fill_cuda);
  allocator_kernel.set(gpu, cuda_allocator);
  device_name_kernel.set(gpu, device_name);
  native_bf16_kernel.set(gpu, [](int index) { return context(index).cc_major >= 8; });
  synchronize_kernel.set(gpu, synchronize);
  memory_info_kernel.set(gpu, cuda_mem_get_info);
  set_conv_benchmark_kernel.set(gpu, set_cudnn_benchmark);
  conv_benchmark_kernel.set(gpu, cudnn_benchmark);
  profile_range_kernel.set(gpu, [](bool on) { CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop()); });
  communicator_id_kernel.set(gpu, communicator_id);
  make_communicator_kernel.set(gpu, make_communicator);
  make_local_communicators_kernel.set(gpu, make_local_communicators);
  pinned_alloc_kernel.set(gpu, pinned_alloc);  // core/cuda/pinned_cuda.cu
  pinned_free_kernel.set(gpu, pinned_free);
  is_pinned_kernel.set(gpu, is_pinned_ptr);
  wait_host_copies_kernel.set(gpu, wait_host_copies);
  register_graph_kernels();  // core/cuda/graph_cuda.cu: begin/end/abandon_capture
}

}  // namespace

void register_kernels() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  dropout_forward_kernel.set(gpu, dropout_forward);
  dropout_backward_kernel.set(gpu, dropout_backward);
  silu_forward_kernel.set(gpu, silu_forward);
  silu_backward_kernel.set(gpu, silu_backward);
  channel_moments_backward_kernel.set(gpu, channel_moments_backward);
  bn_finalize_forward_kernel.set(gpu, bn_finalize_forward);
  bn_finalize_backward_kernel.set(gpu, bn_finalize_backward);
  lrn_forward_kernel.set(gpu, lrn_forward);
  // cuda::lrn_backward takes grad_out in x's dtype
  lrn_backward_kernel.set(gpu, [](const Tensor& gy, const Tensor& x, int64_t size, double alpha, double beta, double k) {
    return lrn_backward(gy.dtype() == x.dtype() ? gy : gy.to(x.dtype()), x, size, alpha, beta, k);
  });
  normalize_u8_kernel.set(gpu, normalize_u8);
  max_pool2d_forward_kernel.set(gpu, max_pool2d_forward);
  max_pool2d_backward_kernel.set(gpu, max_pool2d_backward);
  avg_pool2d_forward_kernel.set(gpu, avg_pool2d_forward);
  avg_pool2d_backward_kernel.set(gpu, avg_pool2d_backward);
  adaptive_avg_pool2d_forward_kernel.set(gpu, adaptive_avg_pool2d_forward);
  adaptive_avg_pool2d_backward_kernel.set(gpu, adaptive_avg_pool2d_backward);
  global_avg_pool_forward_kernel.set(gpu, global_avg_pool_forward);
  global_avg_pool_backward_kernel.set(gpu, global_avg_pool_backward);

  // cuDNN keeps no state between the passes: the `saved` handle stays null
  conv2d_forward_kernel.set(gpu, [](const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p,
                                    std::shared_ptr<void>*) { return conv2d_forward(x, w, b, p); });
  conv2d_backward_kernel.set(gpu, conv2d_backward);
  conv_bn_stats_forward_kernel.set(gpu, conv_bn_stats_forward);
  conv_bn_stats_backward_kernel.set(gpu, conv_bn_stats_backward);
  matmul_kernel.set(gpu, matmul);

  batch_norm_forward_kernel.set(gpu, batch_norm_forward);
  batch_norm_backward_kernel.set(gpu, batch_norm_backward);
  batch_norm_relu_forward_kernel.set(gpu, batch_norm_relu_forward);
  batch_norm_relu_backward_kernel.set(gpu, batch_norm_relu_backward);
  increment_i64_kernel.set(gpu, increment);  // core/cuda/copy_cuda.cu
  // cross_entropy's saved state is the weight sum of the weighted loss (undefined without weights)
  cross_entropy_forward_kernel.set(gpu, cross_entropy_forward);
  cross_entropy_backward_kernel.set(gpu, cross_entropy_backward);
  // soft_cross_entropy keeps no saved state: its backward recomputes from the logits and targets
  soft_cross_entropy_forward_kernel.set(gpu, [](const Tensor& logits, const Tensor& targets, double e, const Tensor& w,
                                                Tensor* /*saved*/) {
    return soft_cross_entropy_forward(logits, targets, e, w);
  });
  soft_cross_entropy_backward_kernel.set(gpu, [](const Tensor& gl, const Tensor& logits, const Tensor& targets, double e,
                                                 const Tensor& w, const Tensor& /*saved*/) {
    return soft_cross_entropy_backward(gl, logits, targets, e, w);
  });
  softmax_kernel.set(gpu, softmax);

  binary_kernel.set(gpu, elementwise_binary);
  unary_kernel.set(gpu, elementwise_unary);
  affine_kernel.set(gpu, affine);
  all_finite_kernel.set(gpu, all_finite);
  sum_kernel.set(gpu, sum);
  accumulate_step_stats_kernel.set(gpu, accumulate_step_stats);
  register_optimizer_kernels();
  register_device_kernels();
}

}  // namespace kiln::cuda
