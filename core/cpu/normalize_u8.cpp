// normalize_u8 on the CPU (the kernel of core/ops/normalize_u8.h's slot; the op is core/ops/normalize_u8.cpp).
// A table of C x 256 values built with data/normalize.cpp's formula (double, rounded once to f32,
// then to bf16/f16) makes each byte one lookup: bit-exact with the formula and with the CPU
// pipeline's normalize. The pixel loop is split over OpenMP threads; with one channel the lookup
// loop is a plain indexed copy the compiler can vectorise (gathers).
// Tests: tests/core/normalize_u8_test.cpp.
#include <cstring>

#include "core/dtype.h"
#include "core/ops/normalize_u8.h"

namespace kiln::cpu {

namespace {

template <typename T>
void lookup(const uint8_t* x, int64_t n, int64_t c, const T* lut, T* y) {
  const int64_t pixels = n / c;
  if (c == 1) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) y[i] = lut[x[i]];
    return;
  }
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t k = 0; k < c; ++k) y[p * c + k] = lut[k * 256 + x[p * c + k]];
}

}  // namespace

Tensor normalize_u8(const Tensor& x0, const NormalizeU8Params& p, DType out) {
  const Tensor x = x0.contiguous();
  const int64_t c = static_cast<int64_t>(p.mean.size()), n = x.numel();
  std::vector<float> lut(static_cast<size_t>(c * 256));
  for (int64_t k = 0; k < c; ++k)
    for (int v = 0; v < 256; ++v)  // data/normalize.cpp's expression, operation for operation
      lut[static_cast<size_t>(k * 256 + v)] = static_cast<float>((v / 255.0 - p.mean[k]) / p.std[k]);
  Tensor y = Tensor::empty(x.shape(), out, x.device());
  const uint8_t* px = static_cast<const uint8_t*>(x.raw_data());
  if (out == DType::f32) {
    lookup(px, n, c, lut.data(), static_cast<float*>(y.raw_data()));
    return y;
  }
  std::vector<uint16_t> lut16(lut.size());
  for (size_t i = 0; i < lut.size(); ++i) lut16[i] = out == DType::bf16 ? float_to_bf16(lut[i]) : float_to_f16(lut[i]);
  lookup(px, n, c, lut16.data(), static_cast<uint16_t*>(y.raw_data()));
  return y;
}

}  // namespace kiln::cpu
