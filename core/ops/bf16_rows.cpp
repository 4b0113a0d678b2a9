// bf16 <-> f32 rows; see bf16_rows.h.
#include "core/ops/bf16_rows.h"

#include "core/dtype.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KILN_BF16_AVX512 1
#endif

namespace kiln::ops {

namespace {

#ifdef KILN_BF16_AVX512
#define KILN_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
// NOTE: GCC 12 warns that the _mm512_undefined_* inside its own intrinsics may be used uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

KILN_TARGET_AVX512 void bf16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
}

// float_to_bf16 on 16 lanes: u + 0x7fff + ((u >> 16) & 1), high half; NaN: (u >> 16) | 0x40.
KILN_TARGET_AVX512 void f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  const __m512i one = _mm512_set1_epi32(1), round = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i));
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(round, _mm512_and_si512(hi, one))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
    r = _mm512_mask_or_epi32(r, nan, hi, quiet);
    _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(r));
  }
}
#pragma GCC diagnostic pop

bool have_avx512() {
  static const bool on = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl");
  return on;
}
#endif

}  // namespace

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
#ifdef KILN_BF16_AVX512
  if (have_avx512()) return bf16_to_f32_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
#ifdef KILN_BF16_AVX512
  if (have_avx512()) return f32_to_bf16_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

}  // namespace kiln::ops
