// Deterministic two-pass reductions over a logical (A, R, B) array: reduce R, keep A and B.
//   pass 1: the R rows are split into P parts; each block reduces one part of 32 columns (B > 1:
//           threads across columns so loads coalesce) or one part of a row (B == 1) into
//           partial[a][p][b][k] (f32), NV values at a time (batch norm reduces two moments at once);
//   pass 2: one thread per (a, b) combines its P partials in f64 in a fixed order and calls
//           store(a, b, vals) — the result does not depend on timing (no atomics).
// `load(a, r, b)` returns Vals<NV>; `Combine` is SumCombine or MaxCombine. Used by reduce_cuda.cu,
// batch_norm_cuda.cu and loss_cuda.cu.
#pragma once
#include <algorithm>
#include <cmath>

#include "core/cuda/kernel_util.cuh"

namespace kiln::cuda {

template <int NV>
struct Vals {
  float v[NV];
};

struct SumCombine {
  template <typename T> __device__ static T identity() { return T(0); }
  template <typename T> __device__ static T op(T a, T b) { return a + b; }
};
// NaN wins, so a NaN anywhere shows in the result.
struct MaxCombine {
  template <typename T> __device__ static T identity() { return -INFINITY; }
  template <typename T> __device__ static T op(T a, T b) { return (a > b || a != a) ? a : b; }
};

template <typename C>
__device__ float block_combine(float v) {
  __shared__ float shared[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = C::op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : C::template identity<float>();
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = C::op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

constexpr int kColX = 32, kColY = 8;  // column kernel block: 32 columns x 8 rows

template <int NV, typename C, typename Load>
__global__ void col_reduce_kernel(Load load, int64_t A, int64_t R, int64_t B, int64_t rows_per_part, float* partial) {
  __shared__ float sh[NV][kColY][kColX + 1];
  int P = gridDim.y, p = blockIdx.y;
  int64_t b = blockIdx.x * int64_t(kColX) + threadIdx.x;
  int64_t r0 = p * rows_per_part, r1 = min(R, r0 + rows_per_part);
  for (int64_t a = blockIdx.z; a < A; a += gridDim.z) {
    float acc[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) acc[k] = C::template identity<float>();
    if (b < B) {
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kColY) {
        Vals<NV> v = load(a, r, b);
#pragma unroll
        for (int k = 0; k < NV; ++k) acc[k] = C::op(acc[k], v.v[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) sh[k][threadIdx.y][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && b < B) {
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        float s = sh[k][0][threadIdx.x];
        for (int y = 1; y < kColY; ++y) s = C::op(s, sh[k][y][threadIdx.x]);
        partial[((a * P + p) * B + b) * NV + k] = s;
      }
    }
    __syncthreads();
  }
}

template <int NV, typename C, typename Load>
__global__ void row_reduce_kernel(Load load, int64_t A, int64_t R, int64_t cols_per_part, float* partial) {
  int P = gridDim.x, p = blockIdx.x;
  int64_t r0 = p * cols_per_part, r1 = min(R, r0 + cols_per_part);
  for (int64_t a = blockIdx.y; a < A; a += gridDim.y) {
    float acc[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) acc[k] = C::template identity<float>();
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
      Vals<NV> v = load(a, r, 0);
#pragma unroll
      for (int k = 0; k < NV; ++k) acc[k] = C::op(acc[k], v.v[k]);
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      float s = block_combine<C>(acc[k]);
      if (threadIdx.x == 0) partial[(a * P + p) * NV + k] = s;
    }
  }
}

template <int NV, typename C, typename Store>
__global__ void finalize_kernel(const float* partial, int64_t A, int P, int64_t B, Store store) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < A * B; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t a = i / B, b = i % B;
    double acc[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) acc[k] = C::template identity<double>();
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int k = 0; k < NV; ++k) acc[k] = C::op(acc[k], double(partial[((a * P + p) * B + b) * NV + k]));
    store(a, b, acc);
  }
}

// Common loads and stores: a packed f32 vector as (1, R, 1); the single result as f64.
struct LoadVector {
  const float* v;
  __device__ Vals<1> operator()(int64_t, int64_t r, int64_t) const { return {{v[r]}}; }
};
struct StoreF64 {
  double* out;
  __device__ void operator()(int64_t, int64_t, const double* v) const { *out = v[0]; }
};

// Runs both passes on `device`'s stream. A, B >= 1; R >= 0 (R == 0 gives the identity).
template <int NV, typename C, typename Load, typename Store>
void reduce_arb(int device, int64_t A, int64_t R, int64_t B, Load load, Store store) {
  DeviceContext& ctx = context(device);
  cudaStream_t s = ctx.stream;
  const int64_t target_blocks = int64_t(ctx.sm_count) * 8;
  const int64_t a_blocks = std::min<int64_t>(A, 65535);
  int64_t P = 1, per = std::max<int64_t>(R, 1);
  if (B > 1) {
    int64_t bx = (B + kColX - 1) / kColX;
    P = std::clamp<int64_t>(target_blocks / (bx * a_blocks), 1, std::max<int64_t>(1, R / 64));
    P = std::min<int64_t>(P, 65535);
    per = std::max<int64_t>(1, (R + P - 1) / P);
    P = std::max<int64_t>(1, (R + per - 1) / per);
  } else {
    P = std::clamp<int64_t>(target_blocks / a_blocks, 1, std::max<int64_t>(1, R / 2048));
    per = std::max<int64_t>(1, (R + P - 1) / P);
    P = std::max<int64_t>(1, (R + per - 1) / per);
  }
  Tensor partial = Tensor::empty({A * P * B * NV}, DType::f32, Device::cuda(device));
  float* pp = static_cast<float*>(partial.raw_data());
  if (B > 1) {
    dim3 grid(static_cast<unsigned>((B + kColX - 1) / kColX), static_cast<unsigned>(P), static_cast<unsigned>(a_blocks));
    KILN_CHECK(grid.x <= 2147483647u, "reduction: too many columns (", B, ")");
    col_reduce_kernel<NV, C><<<grid, dim3(kColX, kColY), 0, s>>>(load, A, R, B, per, pp);
  } else {
    dim3 grid(static_cast<unsigned>(P), static_cast<unsigned>(a_blocks));
    row_reduce_kernel<NV, C><<<grid, 256, 0, s>>>(load, A, R, per, pp);
  }
  CUDA_CHECK_LAUNCH();
  constexpr int kThreads = 256;
  finalize_kernel<NV, C><<<grid_for(device, A * B, kThreads), kThreads, 0, s>>>(pp, A, static_cast<int>(P), B, store);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
