// Element types. f32 is the training type; f16/bf16 are the low precisions (mixed precision keeps
// master weights in f32); i32/i64 hold labels and indices; u8 holds images; f64 exists on CPU
// for tests (finite differences and reference checks).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace kiln {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8, f64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
inline bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}

// NOTE: round-to-nearest-even, NaN kept quiet; matches PyTorch's float -> bf16 conversion.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);

// The C++ type behind a dtype, for kernels that are templated on it.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };

}  // namespace kiln
