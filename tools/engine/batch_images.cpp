// A loader batch's images on the device (see batch_images.h).
#include "tools/engine/batch_images.h"

#include "core/ops/normalize_u8.h"
#include "core/rng.h"

namespace kiln {

Tensor device_images(const Tensor& images, const NormalizeOptions& norm, Device device, DType dtype) {
  if (images.dtype() != DType::u8) return images.to(device).to(dtype);
  return ops::normalize_u8(images.to(device), norm.mean, norm.std, dtype);
}

Tensor probe_images(int64_t b, const ImageShape& shape, bool u8, Device device, DType dtype) {
  const Shape s{b, shape.h, shape.w, shape.c};
  if (!u8) return rand_normal(s, 0, 1, DType::f32, device).to(dtype);
  Tensor bytes = Tensor::empty(s, DType::u8);
  uint8_t* p = static_cast<uint8_t*>(bytes.raw_data());
  for (int64_t i = 0, n = bytes.numel(); i < n; ++i) p[i] = static_cast<uint8_t>(mix64(static_cast<uint64_t>(i)));
  return bytes;
}

}  // namespace kiln
