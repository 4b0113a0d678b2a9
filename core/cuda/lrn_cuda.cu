// Local response normalisation across the last (channel) dim, PyTorch's definition:
//   s_c = k + alpha/size * sum_{c' in [c - size/2, c + (size-1)/2]} x_c'^2,   y_c = x_c * s_c^-beta
//   dx_c = dy_c * s_c^-beta - 2*alpha*beta/size * x_c * sum_{c' : c in window(c')} dy_c' x_c' s_c'^(-beta-1)
// (c in window(c') <=> c' in [c - (size-1)/2, c + size/2]). Our own kernels rather than cuDNN's LRN:
// cuDNN centres even windows the other way (floor((n-1)/2) before) and wants channels in dim 1.
// One thread per element; the windows are small (AlexNet: 5), so the backward recomputes s_c' from
// cached loads instead of storing it. Tests: tests/gpu/lrn_test.cpp.
#include "core/cuda/cuda_ops.h"
#include "core/cuda/kernel_util.cuh"

namespace kiln::cuda {
namespace {

struct LrnParams {
  int64_t C, size;
  float alpha_n, beta, k;  // alpha_n = alpha / size
};

template <typename T>
__device__ __forceinline__ float lrn_scale(const T* row, int64_t c, const LrnParams& p) {
  int64_t lo = max(c - p.size / 2, int64_t(0)), hi = min(c + (p.size - 1) / 2, p.C - 1);
  float s = 0.f;
  for (int64_t j = lo; j <= hi; ++j) {
    float v = to_float(row[j]);
    s += v * v;
  }
  return p.k + p.alpha_n * s;
}

template <typename T>
__global__ void lrn_fwd_kernel(const T* x, T* y, LrnParams p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = i % p.C;
    const T* row = x + (i - c);
    y[i] = from_float<T>(to_float(x[i]) * powf(lrn_scale(row, c, p), -p.beta));
  }
}

template <typename T>
__global__ void lrn_bwd_kernel(const T* dy, const T* x, T* dx, LrnParams p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = i % p.C;
    const T* xrow = x + (i - c);
    const T* grow = dy + (i - c);
    int64_t lo = max(c - (p.size - 1) / 2, int64_t(0)), hi = min(c + p.size / 2, p.C - 1);
    float acc = 0.f;
    for (int64_t j = lo; j <= hi; ++j)
      acc += to_float(grow[j]) * to_float(xrow[j]) * powf(lrn_scale(xrow, j, p), -p.beta - 1.f);
    float own = powf(lrn_scale(xrow, c, p), -p.beta);
    dx[i] = from_float<T>(to_float(grow[c]) * own - 2.f * p.alpha_n * p.beta * to_float(xrow[c]) * acc);
  }
}

LrnParams params(const char* op, const Tensor& x, int64_t size, double alpha, double beta, double k) {
  KILN_CHECK(x.dim() >= 2, op, ": x must have a channel (last) dim, got ", x.str());
  KILN_CHECK(size >= 1, op, ": size must be >= 1, got ", size);
  return {x.size(-1), size, static_cast<float>(alpha / static_cast<double>(size)), static_cast<float>(beta),
          static_cast<float>(k)};
}

}  // namespace

Tensor lrn_forward(const Tensor& x0, int64_t size, double alpha, double beta, double k) {
  int device = same_device("local_response_norm", {&x0});
  LrnParams p = params("local_response_norm", x0, size, alpha, beta, k);
  Tensor x = packed(x0);
  Tensor y = empty_on(x.shape(), x.dtype(), x);
  int64_t n = x.numel();
  if (n == 0) return y;
  DeviceGuard g(device);
  constexpr int kThreads = 256;
  dispatch_float(x.dtype(), "local_response_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    lrn_fwd_kernel<T><<<grid_for(device, n, kThreads), kThreads, 0, stream_of(device)>>>(
        static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), p, n);
  });
  CUDA_CHECK_LAUNCH();
  return y;
}

Tensor lrn_backward(const Tensor& gy0, const Tensor& x0, int64_t size, double alpha, double beta, double k) {
  int device = same_device("local_response_norm_backward", {&gy0, &x0});
  LrnParams p = params("local_response_norm_backward", x0, size, alpha, beta, k);
  KILN_CHECK(gy0.shape() == x0.shape() && gy0.dtype() == x0.dtype(), "local_response_norm_backward: gradient ",
             gy0.str(), " for x ", x0.str());
  Tensor x = packed(x0), gy = packed(gy0);
  Tensor dx = empty_on(x.shape(), x.dtype(), x);
  int64_t n = x.numel();
  if (n == 0) return dx;
  DeviceGuard g(device);
  constexpr int kThreads = 256;
  dispatch_float(x.dtype(), "local_response_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    lrn_bwd_kernel<T><<<grid_for(device, n, kThreads), kThreads, 0, stream_of(device)>>>(
        static_cast<const T*>(gy.raw_data()), static_cast<const T*>(x.raw_data()), static_cast<T*>(dx.raw_data()), p,
        n);
  });
  CUDA_CHECK_LAUNCH();
  return dx;
}

}  // namespace kiln::cuda
