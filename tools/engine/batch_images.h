// A loader batch's images as the device computes on them (data.upload, docs/data.md "Bytes to the
// device"): floats (N, H, W, C) of the compute dtype on the training device.
//   u8 images (the loader's dtype "u8"): uploaded as bytes, then normalised on the device by
//     ops::normalize_u8 with the batch's mean/std — the CPU pipeline's normalize, value for value;
//   f32/bf16 images (normalised by the loader on the CPU): uploaded and cast, as before.
// Every consumer of batches uses it: run_epoch (tools/engine/epoch.cpp), run_eval
// (tools/engine/evaluate.cpp), the time budget's eval prediction and AutoBatch's probe (trainer.cpp).
// Tests: tests/engine/upload_test.cpp, tests/core/normalize_u8_test.cpp, tests/gpu/normalize_u8_test.cpp.
#pragma once
#include <cstdint>

#include "core/device.h"
#include "core/tensor.h"
#include "data/loader.h"

namespace kiln {

// `images` (N, H, W, C) on `device` as `dtype`; u8 images are normalised with `norm` there.
Tensor device_images(const Tensor& images, const NormalizeOptions& norm, Device device, DType dtype);
inline Tensor device_images(const Batch& b, Device device, DType dtype) {
  return device_images(b.images, b.normalize, device, dtype);
}

// AutoBatch's probe batch of b images of `shape` as training's loader gives them: with `u8`, random
// bytes on the host (train_step uploads and normalises them, so the bytes and the op's output are
// counted), else standard normals on `device` as `dtype`.
Tensor probe_images(int64_t b, const ImageShape& shape, bool u8, Device device, DType dtype);

}  // namespace kiln
