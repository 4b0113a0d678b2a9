// normalize_u8: uint8 pixels -> normalised floats, on the pixels' own device. For a batch the loader
// delivers as bytes (data.upload = "u8", docs/data.md): the bytes go to the GPU (1/4 of f32's
// upload) and become floats there.
//   x: (..., C) u8, contiguous or not (NHWC for image batches); mean, std: 1 or C values each
//   y: x's shape, dtype `out` (f32, bf16 or f16), on x's device:
//      y[..., c] = (x[..., c] / 255 - mean[c]) / std[c]
// NOTE: the value is computed in double and rounded once to f32 — data/normalize.cpp's formula, in
// its order of operations — so the f32 result equals the CPU pipeline's normalize bit for bit, and
// bf16/f16 are that f32 value rounded to nearest even (bf16: exactly the pipeline's bf16 batches).
// Not recorded by autograd (bytes carry no gradient). At most kMaxChannels channels.
// The op is core/ops/normalize_u8.cpp; its kernels fill the slot below: core/cpu/normalize_u8.cpp,
// core/cuda/normalize_u8_cuda.cu. Tests: tests/core/normalize_u8_test.cpp, tests/gpu/normalize_u8_test.cpp.
#pragma once
#include <vector>

#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

Tensor normalize_u8(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& std, DType out);

}  // namespace kiln::ops

namespace kiln {

// The checked arguments the kernels receive: mean and std expanded to one value per channel.
struct NormalizeU8Params {
  static constexpr int kMaxChannels = 16;
  std::vector<double> mean, std;  // C values each, std non-zero
};

// --- normalize_u8's kernel (core/kernel_slot.h): y = float((x / 255.0 - mean[c]) / std[c]) computed
// in double, then rounded to `out` (f32, bf16 or f16; round to nearest even). x: u8 (..., C) with
// C = p.mean.size(), any strides; y: contiguous, x's shape, on x's device.
extern KernelSlot<Tensor (*)(const Tensor& x, const NormalizeU8Params& p, DType out)> normalize_u8_kernel;

}  // namespace kiln
