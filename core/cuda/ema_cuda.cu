// The weight EMA's update on a GPU (the kernel of core/optim_kernels.h's slot, used by optim/ema.cpp):
// one grid-stride launch per tensor on the device's stream, f32 math as the CPU's
// (d * ema + (1 - d) * w), nothing read back to the host.
#include <cstdint>

#include "core/check.h"
#include "core/cuda/runtime.h"
#include "core/tensor.h"

namespace kiln::cuda {
namespace {
__global__ void ema_kernel(float* __restrict__ ema, const float* __restrict__ w, int64_t n, float d, float one_minus_d) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    ema[i] = d * ema[i] + one_minus_d * w[i];
}
}  // namespace

void ema_update(const Tensor& ema, const Tensor& live, float d) {
  KILN_CHECK(ema.dtype() == DType::f32 && live.dtype() == DType::f32 && ema.numel() == live.numel() &&
                 ema.is_contiguous() && live.is_contiguous() && ema.device() == live.device(),
             "EMA: the average ", ema.str(), " and the weights ", live.str(), " must be contiguous f32 of one size on one device");
  const int64_t n = live.numel();
  if (n == 0) return;
  const int device = live.device().index;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 4096 ? blocks : 4096);
  DeviceGuard guard(device);
  ema_kernel<<<grid, kThreads, 0, stream_of(device)>>>(ema.data<float>(), live.data<float>(), n, d, 1.0f - d);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
