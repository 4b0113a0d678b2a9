// Shared pieces of the backend's kernels (included by .cu files only):
//   - element types: f32 = float, f16 = __half, bf16 = __nv_bfloat16, widened to float for math;
//   - dispatch_float(): calls a generic lambda with the element type of a floating DType;
//   - OffsetCalc: linear index -> element offsets of up to 3 strided operands (dims coalesced);
//   - block_sum(): a block-wide reduction through shared memory;
//   - host helpers: argument checks and packing to contiguous memory without autograd.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/tensor.h"

namespace kiln::cuda {

// --- element types ----------------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T> struct TypeTag { using type = T; };

// f(TypeTag<T>{}) with T the element type of `t` (f32, f16 or bf16); other dtypes throw, naming `op`.
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f(TypeTag<float>{}); return;
    case DType::f16: f(TypeTag<__half>{}); return;
    case DType::bf16: f(TypeTag<__nv_bfloat16>{}); return;
    default:
      KILN_FAIL(op, ": dtype ", dtype_name(t), " is not supported on CUDA; accepted: f32, f16, bf16");
  }
}

// --- strided indexing -------------------------------------------------------------------------------
constexpr int kMaxDims = 10;

// Offsets (in elements) of NARGS operands that share a shape, for a row-major linear index.
// Built on the host: size-1 dims dropped, dims that are contiguous in every operand merged, so a
// plain contiguous tensor becomes one dim and a bias broadcast over the last dim becomes two.
template <int NARGS>
struct OffsetCalc {
  int nd = 0;
  int64_t size[kMaxDims];
  int64_t stride[NARGS][kMaxDims];

  template <typename Index>
  __device__ __forceinline__ void get(Index linear, Index (&off)[NARGS]) const {
#pragma unroll
    for (int a = 0; a < NARGS; ++a) off[a] = 0;
    for (int d = nd - 1; d >= 0; --d) {
      Index sz = static_cast<Index>(size[d]);
      Index i = linear % sz;
      linear /= sz;
#pragma unroll
      for (int a = 0; a < NARGS; ++a) off[a] += i * static_cast<Index>(stride[a][d]);
    }
  }
};

template <int NARGS>
OffsetCalc<NARGS> make_offset_calc(const Shape& shape, const std::vector<Shape>& strides) {
  std::vector<int64_t> sz;
  std::vector<std::vector<int64_t>> st(NARGS);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sz.empty();
    for (int a = 0; a < NARGS && merge; ++a) merge = st[a].back() == strides[a][d] * shape[d];
    if (merge) {
      sz.back() *= shape[d];
      for (int a = 0; a < NARGS; ++a) st[a].back() = strides[a][d];
    } else {
      sz.push_back(shape[d]);
      for (int a = 0; a < NARGS; ++a) st[a].push_back(strides[a][d]);
    }
  }
  KILN_CHECK(static_cast<int>(sz.size()) <= kMaxDims, "CUDA kernels support at most ", kMaxDims,
             " non-trivial dims, got shape ", shape_str(shape));
  OffsetCalc<NARGS> c;
  c.nd = static_cast<int>(sz.size());
  for (int d = 0; d < c.nd; ++d) {
    c.size[d] = sz[d];
    for (int a = 0; a < NARGS; ++a) c.stride[a][d] = st[a][d];
  }
  return c;
}

// True when every operand walks memory with unit stride (a single merged dim of stride 1, or none).
template <int NARGS>
bool is_flat(const OffsetCalc<NARGS>& c) {
  if (c.nd == 0) return true;
  if (c.nd != 1) return false;
  for (int a = 0; a < NARGS; ++a)
    if (c.stride[a][0] != 1) return false;
  return true;
}

// Strides of `t` broadcast to `shape` (NumPy rules; 0 on broadcast dims). elementwise_cuda.cu.
Shape broadcast_strides(const Tensor& t, const Shape& shape);

// 32-bit index arithmetic is several times cheaper on the GPU; use it whenever it cannot overflow:
// for the element count, and for the largest offset any operand can reach (a strided view of a
// large storage can address far beyond its own element count).
inline bool fits_u32(int64_t n) { return n < (int64_t(1) << 31); }
template <int NARGS>
bool fits_u32(const OffsetCalc<NARGS>& c, int64_t n) {
  if (!fits_u32(n)) return false;
  for (int a = 0; a < NARGS; ++a) {
    int64_t reach = 0;
    for (int d = 0; d < c.nd; ++d) reach += (c.size[d] - 1) * c.stride[a][d];
    if (!fits_u32(reach + 1)) return false;
  }
  return true;
}

// --- reductions inside a block ----------------------------------------------------------------------
// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in every thread.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T shared[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : T(0);
  return warp_sum(v);
}
template <typename T>
__device__ T block_max(T v, T lowest) {
  __shared__ T shared[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : lowest;
  return warp_max(v);
}

// --- host helpers -----------------------------------------------------------------------------------
// Checks that every defined tensor is a CUDA tensor on one device and returns that device's index.
int same_device(const char* op, std::initializer_list<const Tensor*> ts);
// `t` itself when contiguous, else a packed copy on the same device (no autograd).
Tensor packed(const Tensor& t);
// A contiguous f32 copy of `t` (or `t` itself when it already is one), for per-channel parameters.
Tensor packed_f32(const Tensor& t);
// An uninitialised contiguous tensor shaped like `shape` on the device of `like`.
inline Tensor empty_on(const Shape& shape, DType dtype, const Tensor& like) {
  return Tensor::empty(shape, dtype, like.device());
}
// Copies a device scalar (f32 or i32) to the host; waits for the stream.
float read_f32(const Tensor& t);
int32_t read_i32(const Tensor& t);

}  // namespace kiln::cuda
