// The backward kernel of core/ops/channel_moments.h on the GPU: dy = g_sum[c] + 2 * y * g_sumsq[c], one
// pass over y (16-byte loads when the channel count is a multiple of the pack and the pointers are
// aligned, as in ResNet), f32 math, y's dtype. Tests: tests/gpu/channel_moments_test.cpp.
#include "core/cuda/elementwise_util.cuh"
#include "core/cuda/kernel_util.cuh"
#include "core/ops/channel_moments.h"

namespace kiln::cuda {
namespace {

// V values per thread step; V divides c, so a pack never crosses a row.
template <typename T, int V>
__global__ void moments_backward_kernel(T* __restrict__ dy, const T* __restrict__ y, const float* __restrict__ a,
                                        const float* __restrict__ b, int64_t n, int64_t c) {
  const int64_t packs = n / V;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < packs; i += stride) {
    const int64_t k0 = (i * V) % c;
    Pack<T, V> py = reinterpret_cast<const Pack<T, V>*>(y)[i];
    Pack<T, V> po;
#pragma unroll
    for (int k = 0; k < V; ++k) po.v[k] = from_float<T>(a[k0 + k] + 2.f * to_float(py.v[k]) * b[k0 + k]);
    reinterpret_cast<Pack<T, V>*>(dy)[i] = po;
  }
}

}  // namespace

Tensor channel_moments_backward(const Tensor& y0, const Tensor& g_sum, const Tensor& g_sumsq) {
  const int device = same_device("channel_moments backward", {&y0, &g_sum, &g_sumsq});
  KILN_CHECK(y0.dtype() == DType::f32 || y0.dtype() == DType::f16 || y0.dtype() == DType::bf16,
             "channel_moments backward: needs an f32, f16 or bf16 y on CUDA, got ", y0.str());
  const Tensor y = packed(y0), a = packed_f32(g_sum), b = packed_f32(g_sumsq);
  Tensor dy = empty_on(y.shape(), y.dtype(), y);
  const int64_t n = y.numel(), c = y.shape().back();
  if (n == 0) return dy;
  DeviceGuard guard(device);
  dispatch_float(y.dtype(), "channel_moments backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kV = 16 / sizeof(T);
    constexpr int kThreads = 256;
    const bool vec = c % kV == 0 && aligned16(y.raw_data()) && aligned16(dy.raw_data());
    cudaStream_t s = stream_of(device);
    T* o = static_cast<T*>(dy.raw_data());
    const T* in = static_cast<const T*>(y.raw_data());
    const float* pa = static_cast<const float*>(a.raw_data());
    const float* pb = static_cast<const float*>(b.raw_data());
    if (vec) {
      moments_backward_kernel<T, kV><<<grid_for(device, n / kV, kThreads), kThreads, 0, s>>>(o, in, pa, pb, n, c);
    } else {
      moments_backward_kernel<T, 1><<<grid_for(device, n, kThreads), kThreads, 0, s>>>(o, in, pa, pb, n, c);
    }
    CUDA_CHECK_LAUNCH();
  });
  return dy;
}

}  // namespace kiln::cuda
