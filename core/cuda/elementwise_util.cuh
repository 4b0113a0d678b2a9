// launch_flat(): the packed elementwise loop shared by the backend's .cu files. out[i] = f(a[i]) or
// f(a[i], b[i]), math in f32; when every pointer is 16-byte aligned each thread moves 16 bytes per
// load (4 f32 or 8 f16/bf16 values), which memory-bound kernels need to approach HBM bandwidth.
#pragma once
#include <cstdint>

#include "core/cuda/kernel_util.cuh"

namespace kiln::cuda {

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V, bool kBinary, typename F>
__global__ void flat_kernel(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, int64_t n, F f) {
  int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t nv = n / V;
  for (int64_t i = tid; i < nv; i += stride) {
    Pack<T, V> pa = reinterpret_cast<const Pack<T, V>*>(a)[i];
    Pack<T, V> po;
    if constexpr (kBinary) {
      Pack<T, V> pb = reinterpret_cast<const Pack<T, V>*>(b)[i];
#pragma unroll
      for (int k = 0; k < V; ++k) po.v[k] = from_float<T>(f(to_float(pa.v[k]), to_float(pb.v[k])));
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) po.v[k] = from_float<T>(f(to_float(pa.v[k])));
    }
    reinterpret_cast<Pack<T, V>*>(out)[i] = po;
  }
  for (int64_t i = nv * V + tid; i < n; i += stride) {
    if constexpr (kBinary) out[i] = from_float<T>(f(to_float(a[i]), to_float(b[i])));
    else out[i] = from_float<T>(f(to_float(a[i])));
  }
}

inline bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <bool kBinary, typename T, typename F>
void launch_flat_impl(int device, int64_t n, T* out, const T* a, const T* b, F f) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  constexpr int V = 16 / sizeof(T);
  cudaStream_t s = stream_of(device);
  bool vec = aligned16(out) && aligned16(a) && aligned16(b);
  int grid = grid_for(device, vec ? (n + V - 1) / V : n, kThreads);
  if (vec) flat_kernel<T, V, kBinary><<<grid, kThreads, 0, s>>>(out, a, b, n, f);
  else flat_kernel<T, 1, kBinary><<<grid, kThreads, 0, s>>>(out, a, b, n, f);
  CUDA_CHECK_LAUNCH();
}

// out = f(a), all arrays packed, n elements, on `device` (which must be current).
template <typename T, typename F>
void launch_flat(int device, int64_t n, T* out, const T* a, F f) {
  launch_flat_impl<false>(device, n, out, a, static_cast<const T*>(nullptr), f);
}
// out = f(a, b).
template <typename T, typename F>
void launch_flat(int device, int64_t n, T* out, const T* a, const T* b, F f) {
  launch_flat_impl<true>(device, n, out, a, b, f);
}

}  // namespace kiln::cuda
