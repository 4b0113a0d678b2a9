// Inverted dropout on the GPU with the CPU's counter-based generator (core/rng.h's uniform_at is
// compiled for the device too): element i is kept iff uniform_at(state, i) >= float(p) and scaled by
// float(1/(1-p)). The mask is never stored: the backward regenerates it from the same state, so
// forward, backward and a checkpointed recomputation agree, on any device and thread count.
// Tests: tests/gpu/dropout_test.cpp.
#include "core/cuda/cuda_ops.h"
#include "core/cuda/kernel_util.cuh"
#include "core/rng.h"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, RngState state, float p, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    bool keep = uniform_at(state, static_cast<uint64_t>(i)) >= p;
    y[i] = from_float<T>(to_float(x[i]) * (keep ? scale : 0.f));  // a multiply: a dropped NaN stays NaN
  }
}

Tensor apply_mask(const char* op, const Tensor& x0, double p, RngState state) {
  int device = same_device(op, {&x0});
  KILN_CHECK(p >= 0.0 && p < 1.0, op, ": p must be in [0, 1), got ", p);
  Tensor x = packed(x0);
  Tensor y = empty_on(x.shape(), x.dtype(), x);
  int64_t n = x.numel();
  if (n == 0) return y;
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  constexpr int kThreads = 256;
  int grid = grid_for(device, n, kThreads);
  float fp = static_cast<float>(p), scale = static_cast<float>(1.0 / (1.0 - p));
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_kernel<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), n,
                                                state, fp, scale);
  });
  CUDA_CHECK_LAUNCH();
  return y;
}

}  // namespace

Tensor dropout_forward(const Tensor& x, double p, RngState state) { return apply_mask("dropout", x, p, state); }

Tensor dropout_backward(const Tensor& grad_out, double p, RngState state) {
  return apply_mask("dropout_backward", grad_out, p, state);
}

}  // namespace kiln::cuda
