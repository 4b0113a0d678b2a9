// The weight EMA's update on a GPU (optim/ema.h): one grid-stride launch per tensor on the device's
// stream, f32 math as the CPU loop (d * ema + (1 - d) * w), nothing read back to the host.
#include <cstdint>

#include "core/cuda/runtime.h"

namespace kiln::cuda {
namespace {
__global__ void ema_kernel(float* __restrict__ ema, const float* __restrict__ w, int64_t n, float d, float one_minus_d) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    ema[i] = d * ema[i] + one_minus_d * w[i];
}
}  // namespace

void ema_update_f32(float* ema, const float* w, int64_t n, float d, int device) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 4096 ? blocks : 4096);
  DeviceGuard guard(device);
  ema_kernel<<<grid, kThreads, 0, stream_of(device)>>>(ema, w, n, d, 1.0f - d);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
