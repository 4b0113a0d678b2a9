// normalize_u8 on the GPU (the kernel of core/ops/normalize_u8.h's slot; the op is core/ops/normalize_u8.cpp).
// Each block first builds the C x 256 table in shared memory with data/normalize.cpp's formula
// (double; IEEE double division on every GPU, fast-math or not; rounded once to f32), then each
// thread looks up bytes in a grid-stride loop, four at a time when the sizes allow it. So the f32
// result equals the CPU kernel's (and the CPU pipeline's) bit for bit; bf16/f16 are that f32 value
// rounded to nearest even, as on the CPU.
// Tests: tests/gpu/normalize_u8_test.cpp (against the CPU op).
#include "core/cuda/kernel_util.cuh"
#include "core/ops/normalize_u8.h"

namespace kiln::cuda {
namespace {

constexpr int kMaxC = NormalizeU8Params::kMaxChannels;

struct Norm {  // passed by value: 2 x 16 doubles
  double mean[kMaxC], std[kMaxC];
  int c;
};

template <typename T, typename Index, bool kVec4>
__global__ void normalize_u8_kernel(const uint8_t* __restrict__ x, T* __restrict__ y, Index n, Norm p) {
  __shared__ float lut[kMaxC * 256];
  for (int j = threadIdx.x; j < p.c * 256; j += blockDim.x) {
    const int ch = j / 256, v = j % 256;
    lut[j] = static_cast<float>((v / 255.0 - p.mean[ch]) / p.std[ch]);  // data/normalize.cpp's expression
  }
  __syncthreads();
  const Index stride = Index(gridDim.x) * blockDim.x;
  const unsigned c = static_cast<unsigned>(p.c);
  if constexpr (kVec4) {  // n % 4 == 0 and x 4-byte aligned
    const uchar4* x4 = reinterpret_cast<const uchar4*>(x);
    for (Index q = Index(blockIdx.x) * blockDim.x + threadIdx.x; q < n / 4; q += stride) {
      const uchar4 b = x4[q];
      const Index i = q * 4;
      const unsigned ch = c == 1 ? 0u : static_cast<unsigned>(i % c);
      const uint8_t v[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const unsigned chk = c == 1 ? 0u : (ch + k) % c;
        y[i + k] = from_float<T>(lut[chk * 256 + v[k]]);
      }
    }
  } else {
    for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
      const unsigned ch = c == 1 ? 0u : static_cast<unsigned>(i % c);
      y[i] = from_float<T>(lut[ch * 256 + x[i]]);
    }
  }
}

template <typename T, typename Index>
void launch(int device, const uint8_t* x, T* y, int64_t n, const Norm& p) {
  constexpr int kThreads = 256;
  const bool vec4 = n % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 4 == 0;
  const int grid = grid_for(device, vec4 ? n / 4 : n, kThreads);
  cudaStream_t s = stream_of(device);
  if (vec4) normalize_u8_kernel<T, Index, true><<<grid, kThreads, 0, s>>>(x, y, static_cast<Index>(n), p);
  else normalize_u8_kernel<T, Index, false><<<grid, kThreads, 0, s>>>(x, y, static_cast<Index>(n), p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

Tensor normalize_u8(const Tensor& x0, const NormalizeU8Params& p, DType out) {
  const int device = same_device("normalize_u8", {&x0});
  KILN_CHECK(x0.dtype() == DType::u8, "normalize_u8: x must be a u8 tensor, got ", x0.str());
  const int c = static_cast<int>(p.mean.size());
  KILN_CHECK(c >= 1 && c <= kMaxC && p.std.size() == p.mean.size(), "normalize_u8: ", c, " channels; accepted: 1 to ",
             kMaxC);
  Norm norm{};
  norm.c = c;
  for (int k = 0; k < c; ++k) norm.mean[k] = p.mean[k], norm.std[k] = p.std[k];
  Tensor x = packed(x0);
  Tensor y = empty_on(x.shape(), out, x);
  const int64_t n = x.numel();
  if (n == 0) return y;
  DeviceGuard g(device);
  const uint8_t* px = static_cast<const uint8_t*>(x.raw_data());
  dispatch_float(out, "normalize_u8", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* py = static_cast<T*>(y.raw_data());
    if (fits_u32(n)) launch<T, uint32_t>(device, px, py, n, norm);
    else launch<T, uint64_t>(device, px, py, n, norm);
  });
  return y;
}

}  // namespace kiln::cuda
