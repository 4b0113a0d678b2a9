// Whole-row conversions between bf16 and f32 for the CPU ops that keep bf16 activations and
// compute in f32 (batch norm's rows, Winograd's transforms). Same bits as float_to_bf16 /
// bf16_to_float (core/dtype.h: round to nearest even, NaN kept quiet, denormals kept); on CPUs with
// AVX-512 (F, BW, VL) 16 values per instruction, elsewhere the scalar loop.
// Tests: tests/core/bf16_rows_test.cpp; batch norm's bf16 tests (tests/core/batch_norm_test.cpp).
#pragma once
#include <cstdint>

namespace kiln::ops {

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);

}  // namespace kiln::ops
