// The weight EMA's update on a GPU (the kernels of core/optim_kernels.h's slots, used by optim/ema.cpp):
// one grid-stride launch per tensor on the device's stream, f32 math as the CPU's
// (d * ema + (1 - d) * w), nothing read back to the host. With a skip flag (the fp16 loss scaler's
// count of non-finite steps in a row, an f64 on the device) each thread reads it and leaves the
// tensor as it is when it is > 0: the EMA follows the device's verdict without a host wait.
#include <cstdint>

#include "core/check.h"
#include "core/cuda/runtime.h"
#include "core/tensor.h"

namespace kiln::cuda {
namespace {
__global__ void ema_kernel(float* __restrict__ ema, const float* __restrict__ w, int64_t n, float d, float one_minus_d,
                           const double* __restrict__ skip) {
  if (skip != nullptr && *skip > 0) return;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    ema[i] = d * ema[i] + one_minus_d * w[i];
}

__global__ void copy_unless_kernel(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src, int64_t n,
                                   const double* __restrict__ skip) {
  if (*skip > 0) return;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

const double* skip_ptr(const Tensor& skip, const Tensor& like) {
  if (!skip.defined()) return nullptr;
  KILN_CHECK(skip.dtype() == DType::f64 && skip.numel() == 1 && skip.device() == like.device(),
             "EMA: the skip flag must be an f64 [1] on ", like.device().str(), ", got ", skip.str());
  return static_cast<const double*>(skip.raw_data());  // one element: any view of it is its address
}

int grid_of(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(blocks < 4096 ? blocks : 4096);
}
}  // namespace

void ema_update(const Tensor& ema, const Tensor& live, float d, const Tensor& skip) {
  KILN_CHECK(ema.dtype() == DType::f32 && live.dtype() == DType::f32 && ema.numel() == live.numel() &&
                 ema.is_contiguous() && live.is_contiguous() && ema.device() == live.device(),
             "EMA: the average ", ema.str(), " and the weights ", live.str(), " must be contiguous f32 of one size on one device");
  const double* flag = skip_ptr(skip, live);
  const int64_t n = live.numel();
  if (n == 0) return;
  const int device = live.device().index;
  constexpr int kThreads = 256;
  DeviceGuard guard(device);
  ema_kernel<<<grid_of(n, kThreads), kThreads, 0, stream_of(device)>>>(ema.data<float>(), live.data<float>(), n, d,
                                                                       1.0f - d, flag);
  CUDA_CHECK_LAUNCH();
}

void ema_copy(const Tensor& dst, const Tensor& src, const Tensor& skip) {
  if (!skip.defined()) {
    copy_tensor(dst, src);  // a device-to-device copy on the stream
    return;
  }
  KILN_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel() && dst.is_contiguous() && src.is_contiguous() &&
                 dst.device() == src.device(),
             "EMA: the copy ", dst.str(), " and its source ", src.str(), " must be contiguous, of one dtype and size, on one device");
  const double* flag = skip_ptr(skip, src);
  const int64_t bytes = src.numel() * static_cast<int64_t>(dtype_size(src.dtype()));
  if (bytes == 0) return;
  const int device = src.device().index;
  constexpr int kThreads = 256;
  DeviceGuard guard(device);
  copy_unless_kernel<<<grid_of(bytes, kThreads), kThreads, 0, stream_of(device)>>>(
      static_cast<unsigned char*>(dst.raw_data()), static_cast<const unsigned char*>(src.raw_data()), bytes, flag);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
