// The kernels of ops::bn_finalize on the GPU (core/ops/bn_finalize.h): one thread per channel, f64 math
// (C is at most a few thousand: the launch, not the math, is the cost), rounded once per output, the
// formulas core/ops/bn_finalize.h shares with the CPU. Tests: tests/gpu/bn_finalize_test.cpp.
#include "core/cuda/kernel_util.cuh"
#include "core/ops/bn_finalize.h"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void finalize_kernel(T* __restrict__ sb, float* __restrict__ saved, const float* __restrict__ s,
                                const float* __restrict__ q, const float* __restrict__ g, const float* __restrict__ b,
                                float* __restrict__ rm, float* __restrict__ rv, int64_t C, double n, double momentum,
                                double eps) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const BnFinalizeChannel f = bn_finalize_channel(s[c], q[c], n, g ? g[c] : 1.0, b ? b[c] : 0.0, eps);
  sb[c] = from_float<T>(static_cast<float>(f.scale));
  sb[C + c] = from_float<T>(static_cast<float>(f.bias));
  saved[c] = static_cast<float>(f.mean);
  saved[C + c] = static_cast<float>(f.invstd);
  saved[2 * C + c] = static_cast<float>(f.var);
  if (rm) bn_finalize_running(&rm[c], &rv[c], f, n, momentum);
}

__global__ void finalize_backward_kernel(float* __restrict__ o, const float* __restrict__ gs,
                                         const float* __restrict__ saved, const float* __restrict__ g, int64_t C,
                                         double n) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const BnFinalizeGrads d = bn_finalize_channel_backward(gs[c], gs[C + c], saved[c], saved[C + c], saved[2 * C + c],
                                                         g ? g[c] : 1.0, n);
  o[c] = static_cast<float>(d.sum);
  o[C + c] = static_cast<float>(d.sumsq);
  o[2 * C + c] = static_cast<float>(d.gamma);
  o[3 * C + c] = static_cast<float>(d.beta);
}

const float* ptr(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.raw_data()) : nullptr; }
float* mut_ptr(const Tensor& t) { return t.defined() ? static_cast<float*>(t.raw_data()) : nullptr; }

}  // namespace

BnFinalizeForward bn_finalize_forward(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma,
                                      const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                      double momentum, double eps, DType out) {
  const int device = same_device("bn_finalize", {&sum, &sumsq, &gamma, &beta, &running_mean, &running_var});
  const int64_t C = sum.shape()[0];
  BnFinalizeForward r{Tensor::empty({2, C}, out, sum.device()), Tensor::empty({3, C}, DType::f32, sum.device())};
  if (C == 0) return r;
  DeviceGuard guard(device);
  constexpr int kThreads = 128;
  const int grid = static_cast<int>((C + kThreads - 1) / kThreads);
  dispatch_float(out, "bn_finalize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    finalize_kernel<T><<<grid, kThreads, 0, stream_of(device)>>>(
        static_cast<T*>(r.scale_bias.raw_data()), mut_ptr(r.saved), ptr(sum), ptr(sumsq), ptr(gamma), ptr(beta),
        mut_ptr(running_mean), mut_ptr(running_var), C, static_cast<double>(count), momentum, eps);
    CUDA_CHECK_LAUNCH();
  });
  return r;
}

Tensor bn_finalize_backward(const Tensor& grad, const Tensor& saved, const Tensor& gamma, int64_t count) {
  const int device = same_device("bn_finalize backward", {&grad, &saved, &gamma});
  const int64_t C = saved.shape()[1];
  Tensor o = Tensor::empty({4, C}, DType::f32, saved.device());
  if (C == 0) return o;
  DeviceGuard guard(device);
  constexpr int kThreads = 128;
  const int grid = static_cast<int>((C + kThreads - 1) / kThreads);
  finalize_backward_kernel<<<grid, kThreads, 0, stream_of(device)>>>(mut_ptr(o), ptr(grad), ptr(saved), ptr(gamma), C,
                                                                     static_cast<double>(count));
  CUDA_CHECK_LAUNCH();
  return o;
}

}  // namespace kiln::cuda
