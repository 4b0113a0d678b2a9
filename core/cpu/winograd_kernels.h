// The per-tile and per-row transform kernels of Winograd F(2x2,3x3) (core/cpu/winograd.cpp, the
// only includer): input, output and output-gradient tiles, weights and weight gradients, and
// Kernels<S>, the set for one storage type at one Simd level.
#pragma once
#include <cstdint>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu/winograd.h"

namespace kiln::ops::winograd::kernels {

// ---------------------------------------------------------------------------------------------
// Per-tile and per-row kernels, at three levels: a portable loop (any CPU) and AVX2 (8 channels per
// vector), both from one template on GCC vector extensions, and AVX-512 (16 channels per vector,
// intrinsics); bf16 rounding exactly as float_to_bf16 everywhere. The best the CPU has runs
// (winograd.cpp, best_simd()). All compute the same f32 expressions in the same order, with no
// multiply-add contraction (AVX2: "avx2" enables no FMA; AVX-512: optimize("fp-contract=off")), so
// they give the same bits, zeros' signs included; a NaN stays a NaN, though its payload may differ
// (x86 keeps the first NaN operand, and scalar and vector code order operands apart). Tests:
// Winograd.SimdTransformKernelsAreBitwiseThePortableOnes, Winograd.SimdAndPortableKernelsAgree.
//
//   in_tile:   v[p][c] = (B^T d B)[p] of 16 input pixels d[4i+j][c] (nullptr: zero padding),
//              B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//   out_tile:  y[a][b][k] = (A^T m A)[a][b] (+ bias[k]) of m[p][k], A^T = [1 1 1 0; 0 1 -1 -1]
//              (y nullptr: past the image; bias nullptr: none)
//   grad_tile: z[p][k] = (A g A^T)[p] of the 2x2 gradient g[a][b][k] (nullptr: past the image)
//   wt_row:    u[p][l] = (G g G^T)[p] of 9 taps g[3r+s][l], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
//   wgrad_row: o[3r+s][l] = (G^T u G)[r][s] of u[p][l]
// Rows of the transformed tile are `plane` elements apart.

// The kernels are written once, on W-lane vectors (GCC's vector extensions), from channel `c` on
// while W lanes remain; they return where they stopped. W = 1 is the portable loop (and every
// SIMD kernel's tail); W = 8 is inlined into functions compiled for AVX2 (below).
// NOTE: the helpers take and give vectors by reference, never by value: a vector wider than 16
// bytes passed by value in a function compiled without AVX has another ABI (GCC's -Wpsabi), and
// these templates are compiled without a target until they are inlined into one.
namespace vec {

template <int W>
struct V {
  typedef float f __attribute__((vector_size(4 * W)));
  typedef uint32_t u __attribute__((vector_size(4 * W)));
  typedef uint16_t h __attribute__((vector_size(2 * W)));
};

#define KILN_VEC_INLINE __attribute__((always_inline)) inline

template <int W>
KILN_VEC_INLINE void load(const float* p, typename V<W>::f& v) {
  std::memcpy(&v, p, sizeof v);
}
template <int W>
KILN_VEC_INLINE void load(const uint16_t* p, typename V<W>::f& v) {
  typename V<W>::h h;
  std::memcpy(&h, p, sizeof h);
  v = reinterpret_cast<typename V<W>::f>(__builtin_convertvector(h, typename V<W>::u) << 16);
}
// Zeros for a null pointer (padding).
template <int W, typename S>
KILN_VEC_INLINE void load_or_zero(const S* p, typename V<W>::f& v) {
  if (p)
    load<W>(p, v);
  else
    v = typename V<W>::f{};
}
template <int W>
KILN_VEC_INLINE void store(float* p, const typename V<W>::f& v) {
  std::memcpy(p, &v, sizeof v);
}
// float_to_bf16 on W lanes, bit for bit.
template <int W>
KILN_VEC_INLINE void store(uint16_t* p, const typename V<W>::f& v) {
  using U = typename V<W>::u;
  const U u = reinterpret_cast<U>(v), hi = u >> 16;
  const U r = ((u & 0x7fffffffu) > 0x7f800000u) ? (hi | 0x40u) : ((u + 0x7fffu + (hi & 1u)) >> 16);
  const typename V<W>::h h = __builtin_convertvector(r, typename V<W>::h);
  std::memcpy(p, &h, sizeof h);
}

template <int W, typename S>
KILN_VEC_INLINE int64_t in_tile(int64_t c, const S* const* src, int64_t C, S* out, int64_t plane) {
  using F = typename V<W>::f;
  for (; c + W <= C; c += W) {
    F d[16];
    for (int k = 0; k < 16; ++k) load_or_zero<W>(src[k] ? src[k] + c : nullptr, d[k]);
    F t[4][4];
    for (int j = 0; j < 4; ++j) {
      t[0][j] = d[j] - d[8 + j];
      t[1][j] = d[4 + j] + d[8 + j];
      t[2][j] = d[8 + j] - d[4 + j];
      t[3][j] = d[4 + j] - d[12 + j];
    }
    for (int i = 0; i < 4; ++i) {
      store<W>(out + (4 * i + 0) * plane + c, t[i][0] - t[i][2]);
      store<W>(out + (4 * i + 1) * plane + c, t[i][1] + t[i][2]);
      store<W>(out + (4 * i + 2) * plane + c, t[i][2] - t[i][1]);
      store<W>(out + (4 * i + 3) * plane + c, t[i][1] - t[i][3]);
    }
  }
  return c;
}

template <int W, typename S>
KILN_VEC_INLINE int64_t out_tile(int64_t k, const float* m, int64_t plane, int64_t K, const float* bias, S* const* y) {
  using F = typename V<W>::f;
  for (; k + W <= K; k += W) {
    F s[2][4];
    for (int j = 0; j < 4; ++j) {
      F a0, a1, a2, a3;
      load<W>(m + j * plane + k, a0);
      load<W>(m + (4 + j) * plane + k, a1);
      load<W>(m + (8 + j) * plane + k, a2);
      load<W>(m + (12 + j) * plane + k, a3);
      s[0][j] = a0 + a1 + a2;
      s[1][j] = a1 - a2 - a3;
    }
    for (int a = 0; a < 2; ++a) {
      F v0 = s[a][0] + s[a][1] + s[a][2], v1 = s[a][1] - s[a][2] - s[a][3];
      if (bias) {
        F b;
        load<W>(bias + k, b);
        v0 += b;
        v1 += b;
      }
      if (y[2 * a]) store<W>(y[2 * a] + k, v0);
      if (y[2 * a + 1]) store<W>(y[2 * a + 1] + k, v1);
    }
  }
  return k;
}

template <int W, typename S>
KILN_VEC_INLINE int64_t grad_tile(int64_t k, const S* const* g, int64_t K, S* out, int64_t plane) {
  using F = typename V<W>::f;
  for (; k + W <= K; k += W) {
    F d[4];
    for (int q = 0; q < 4; ++q) load_or_zero<W>(g[q] ? g[q] + k : nullptr, d[q]);
    const F zero{};  // 0 - x, not -x: +0 for a zero, as the AVX-512 kernel computes it
    const F t[4][2] = {
        {d[0], d[1]}, {d[0] + d[2], d[1] + d[3]}, {d[0] - d[2], d[1] - d[3]}, {zero - d[2], zero - d[3]}};
    for (int i = 0; i < 4; ++i) {
      store<W>(out + (4 * i + 0) * plane + k, t[i][0]);
      store<W>(out + (4 * i + 1) * plane + k, t[i][0] + t[i][1]);
      store<W>(out + (4 * i + 2) * plane + k, t[i][0] - t[i][1]);
      store<W>(out + (4 * i + 3) * plane + k, zero - t[i][1]);
    }
  }
  return k;
}

template <int W, typename S>
KILN_VEC_INLINE int64_t wt_row(int64_t l, const S* const* g, int64_t L, S* out, int64_t plane) {
  using F = typename V<W>::f;
  for (; l + W <= L; l += W) {
    F v[9];
    for (int q = 0; q < 9; ++q) load<W>(g[q] + l, v[q]);
    F gg[4][3];
    for (int s = 0; s < 3; ++s) {
      gg[0][s] = v[s];
      gg[1][s] = 0.5f * (v[s] + v[3 + s] + v[6 + s]);
      gg[2][s] = 0.5f * (v[s] - v[3 + s] + v[6 + s]);
      gg[3][s] = v[6 + s];
    }
    for (int a = 0; a < 4; ++a) {
      store<W>(out + (4 * a + 0) * plane + l, gg[a][0]);
      store<W>(out + (4 * a + 1) * plane + l, 0.5f * (gg[a][0] + gg[a][1] + gg[a][2]));
      store<W>(out + (4 * a + 2) * plane + l, 0.5f * (gg[a][0] - gg[a][1] + gg[a][2]));
      store<W>(out + (4 * a + 3) * plane + l, gg[a][2]);
    }
  }
  return l;
}

template <int W, typename S>
KILN_VEC_INLINE int64_t wgrad_row(int64_t l, const float* u, int64_t plane, int64_t L, S* const* out) {
  using F = typename V<W>::f;
  for (; l + W <= L; l += W) {
    F h[3][4];
    for (int b = 0; b < 4; ++b) {
      F u0, u1, u2, u3;
      load<W>(u + b * plane + l, u0);
      load<W>(u + (4 + b) * plane + l, u1);
      load<W>(u + (8 + b) * plane + l, u2);
      load<W>(u + (12 + b) * plane + l, u3);
      h[0][b] = u0 + 0.5f * (u1 + u2);
      h[1][b] = 0.5f * (u1 - u2);
      h[2][b] = 0.5f * (u1 + u2) + u3;
    }
    for (int r = 0; r < 3; ++r) {
      store<W>(out[3 * r + 0] + l, h[r][0] + 0.5f * (h[r][1] + h[r][2]));
      store<W>(out[3 * r + 1] + l, 0.5f * (h[r][1] - h[r][2]));
      store<W>(out[3 * r + 2] + l, 0.5f * (h[r][1] + h[r][2]) + h[r][3]);
    }
  }
  return l;
}
#undef KILN_VEC_INLINE

}  // namespace vec

// The portable kernels: one lane at a time.
template <typename S>
void in_tile(const S* const* src, int64_t C, S* out, int64_t plane) {
  vec::in_tile<1>(0, src, C, out, plane);
}
template <typename S>
void out_tile(const float* m, int64_t plane, int64_t K, const float* bias, S* const* y) {
  vec::out_tile<1>(0, m, plane, K, bias, y);
}
template <typename S>
void grad_tile(const S* const* g, int64_t K, S* out, int64_t plane) {
  vec::grad_tile<1>(0, g, K, out, plane);
}
template <typename S>
void wt_row(const S* const* g, int64_t L, S* out, int64_t plane) {
  vec::wt_row<1>(0, g, L, out, plane);
}
template <typename S>
void wgrad_row(const float* u, int64_t plane, int64_t L, S* const* out) {
  vec::wgrad_row<1>(0, u, plane, L, out);
}

#if defined(__x86_64__) && defined(__GNUC__)
// AVX2 (8 lanes, the tail one at a time), for x86-64 CPUs without AVX-512 BF16. "avx2" alone: no
// FMA contraction.
#define KILN_WINOGRAD_AVX2 1
#define KILN_AVX2 __attribute__((target("avx2")))
template <typename S>
KILN_AVX2 void in_tile_avx2(const S* const* src, int64_t C, S* out, int64_t plane) {
  vec::in_tile<1>(vec::in_tile<8>(0, src, C, out, plane), src, C, out, plane);
}
template <typename S>
KILN_AVX2 void out_tile_avx2(const float* m, int64_t plane, int64_t K, const float* bias, S* const* y) {
  vec::out_tile<1>(vec::out_tile<8>(0, m, plane, K, bias, y), m, plane, K, bias, y);
}
template <typename S>
KILN_AVX2 void grad_tile_avx2(const S* const* g, int64_t K, S* out, int64_t plane) {
  vec::grad_tile<1>(vec::grad_tile<8>(0, g, K, out, plane), g, K, out, plane);
}
template <typename S>
KILN_AVX2 void wt_row_avx2(const S* const* g, int64_t L, S* out, int64_t plane) {
  vec::wt_row<1>(vec::wt_row<8>(0, g, L, out, plane), g, L, out, plane);
}
template <typename S>
KILN_AVX2 void wgrad_row_avx2(const float* u, int64_t plane, int64_t L, S* const* out) {
  vec::wgrad_row<1>(vec::wgrad_row<8>(0, u, plane, L, out), u, plane, L, out);
}

#define KILN_WINOGRAD_AVX512 1
// No multiply-add contraction (the same bits as the other levels): GCC fuses these intrinsics'
// mul and add into FMAs unless told per function; clang (the sanitizer build) takes the pragma.
#pragma GCC diagnostic push
#if defined(__clang__)
#pragma clang fp contract(off)
#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), optimize("fp-contract=off")))
// NOTE: GCC 12 warns that the _mm512_undefined_* inside its own intrinsics may be used uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

KILN_AVX512 inline __mmask16 tail(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}
KILN_AVX512 inline __m512 vld(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
KILN_AVX512 inline __m512 vld(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
KILN_AVX512 inline void vst(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
// float_to_bf16 on 16 lanes, bit for bit (vcvtneps2bf16 would flush denormals to zero):
// u + 0x7fff + ((u >> 16) & 1), high half; NaN: (u >> 16) | 0x40.
KILN_AVX512 inline void vst(uint16_t* p, __m512 v, __mmask16 m) {
  const __m512i u = _mm512_castps_si512(v), hi = _mm512_srli_epi32(u, 16);
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)))),
      16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
}

template <typename S>
KILN_AVX512 void in_tile_avx512(const S* const* src, int64_t C, S* out, int64_t plane) {
  for (int64_t c = 0; c < C; c += 16) {
    const __mmask16 m = tail(C - c);
    __m512 d[16];
    for (int k = 0; k < 16; ++k) d[k] = src[k] ? vld(src[k] + c, m) : _mm512_setzero_ps();
    __m512 t[4][4];
    for (int j = 0; j < 4; ++j) {
      t[0][j] = _mm512_sub_ps(d[j], d[8 + j]);
      t[1][j] = _mm512_add_ps(d[4 + j], d[8 + j]);
      t[2][j] = _mm512_sub_ps(d[8 + j], d[4 + j]);
      t[3][j] = _mm512_sub_ps(d[4 + j], d[12 + j]);
    }
    for (int i = 0; i < 4; ++i) {
      vst(out + (4 * i + 0) * plane + c, _mm512_sub_ps(t[i][0], t[i][2]), m);
      vst(out + (4 * i + 1) * plane + c, _mm512_add_ps(t[i][1], t[i][2]), m);
      vst(out + (4 * i + 2) * plane + c, _mm512_sub_ps(t[i][2], t[i][1]), m);
      vst(out + (4 * i + 3) * plane + c, _mm512_sub_ps(t[i][1], t[i][3]), m);
    }
  }
}

template <typename S>
KILN_AVX512 void out_tile_avx512(const float* mp, int64_t plane, int64_t K, const float* bias, S* const* y) {
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 m = tail(K - k);
    __m512 s[2][4];
    for (int j = 0; j < 4; ++j) {
      __m512 a0 = vld(mp + j * plane + k, m), a1 = vld(mp + (4 + j) * plane + k, m),
             a2 = vld(mp + (8 + j) * plane + k, m), a3 = vld(mp + (12 + j) * plane + k, m);
      s[0][j] = _mm512_add_ps(_mm512_add_ps(a0, a1), a2);
      s[1][j] = _mm512_sub_ps(_mm512_sub_ps(a1, a2), a3);
    }
    for (int a = 0; a < 2; ++a) {
      __m512 v0 = _mm512_add_ps(_mm512_add_ps(s[a][0], s[a][1]), s[a][2]);
      __m512 v1 = _mm512_sub_ps(_mm512_sub_ps(s[a][1], s[a][2]), s[a][3]);
      if (bias) {
        const __m512 b = vld(bias + k, m);
        v0 = _mm512_add_ps(v0, b);
        v1 = _mm512_add_ps(v1, b);
      }
      if (y[2 * a]) vst(y[2 * a] + k, v0, m);
      if (y[2 * a + 1]) vst(y[2 * a + 1] + k, v1, m);
    }
  }
}

template <typename S>
KILN_AVX512 void grad_tile_avx512(const S* const* g, int64_t K, S* out, int64_t plane) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 m = tail(K - k);
    __m512 d[4];
    for (int q = 0; q < 4; ++q) d[q] = g[q] ? vld(g[q] + k, m) : zero;
    __m512 t[4][2] = {{d[0], d[1]},
                      {_mm512_add_ps(d[0], d[2]), _mm512_add_ps(d[1], d[3])},
                      {_mm512_sub_ps(d[0], d[2]), _mm512_sub_ps(d[1], d[3])},
                      {_mm512_sub_ps(zero, d[2]), _mm512_sub_ps(zero, d[3])}};
    for (int i = 0; i < 4; ++i) {
      vst(out + (4 * i + 0) * plane + k, t[i][0], m);
      vst(out + (4 * i + 1) * plane + k, _mm512_add_ps(t[i][0], t[i][1]), m);
      vst(out + (4 * i + 2) * plane + k, _mm512_sub_ps(t[i][0], t[i][1]), m);
      vst(out + (4 * i + 3) * plane + k, _mm512_sub_ps(zero, t[i][1]), m);
    }
  }
}

template <typename S>
KILN_AVX512 void wt_row_avx512(const S* const* g, int64_t L, S* out, int64_t plane) {
  const __m512 half = _mm512_set1_ps(0.5f);
  for (int64_t l = 0; l < L; l += 16) {
    const __mmask16 m = tail(L - l);
    __m512 v[9];
    for (int q = 0; q < 9; ++q) v[q] = vld(g[q] + l, m);
    __m512 gg[4][3];
    for (int s = 0; s < 3; ++s) {
      gg[0][s] = v[s];
      gg[1][s] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(v[s], v[3 + s]), v[6 + s]));
      gg[2][s] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(v[s], v[3 + s]), v[6 + s]));
      gg[3][s] = v[6 + s];
    }
    for (int a = 0; a < 4; ++a) {
      vst(out + (4 * a + 0) * plane + l, gg[a][0], m);
      vst(out + (4 * a + 1) * plane + l,
          _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(gg[a][0], gg[a][1]), gg[a][2])), m);
      vst(out + (4 * a + 2) * plane + l,
          _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(gg[a][0], gg[a][1]), gg[a][2])), m);
      vst(out + (4 * a + 3) * plane + l, gg[a][2], m);
    }
  }
}

template <typename S>
KILN_AVX512 void wgrad_row_avx512(const float* u, int64_t plane, int64_t L, S* const* out) {
  const __m512 half = _mm512_set1_ps(0.5f);
  for (int64_t l = 0; l < L; l += 16) {
    const __mmask16 m = tail(L - l);
    __m512 h[3][4];
    for (int b = 0; b < 4; ++b) {
      __m512 u0 = vld(u + b * plane + l, m), u1 = vld(u + (4 + b) * plane + l, m),
             u2 = vld(u + (8 + b) * plane + l, m), u3 = vld(u + (12 + b) * plane + l, m);
      h[0][b] = _mm512_add_ps(u0, _mm512_mul_ps(half, _mm512_add_ps(u1, u2)));
      h[1][b] = _mm512_mul_ps(half, _mm512_sub_ps(u1, u2));
      h[2][b] = _mm512_add_ps(_mm512_mul_ps(half, _mm512_add_ps(u1, u2)), u3);
    }
    for (int r = 0; r < 3; ++r) {
      vst(out[3 * r + 0] + l, _mm512_add_ps(h[r][0], _mm512_mul_ps(half, _mm512_add_ps(h[r][1], h[r][2]))), m);
      vst(out[3 * r + 1] + l, _mm512_mul_ps(half, _mm512_sub_ps(h[r][1], h[r][2])), m);
      vst(out[3 * r + 2] + l, _mm512_add_ps(_mm512_mul_ps(half, _mm512_add_ps(h[r][1], h[r][2])), h[r][3]), m);
    }
  }
}
#pragma GCC diagnostic pop
#endif

// The kernels for S at one level (a level this build lacks gives the portable loops).
template <typename S>
struct Kernels {
  void (*in)(const S* const*, int64_t, S*, int64_t) = in_tile<S>;
  void (*out)(const float*, int64_t, int64_t, const float*, S* const*) = out_tile<S>;
  void (*grad)(const S* const*, int64_t, S*, int64_t) = grad_tile<S>;
  void (*wt)(const S* const*, int64_t, S*, int64_t) = wt_row<S>;
  void (*wgrad)(const float*, int64_t, int64_t, S* const*) = wgrad_row<S>;
  explicit Kernels(Simd level) {
#ifdef KILN_WINOGRAD_AVX2
    if (level == Simd::avx2) use(in_tile_avx2<S>, out_tile_avx2<S>, grad_tile_avx2<S>, wt_row_avx2<S>, wgrad_row_avx2<S>);
#endif
#ifdef KILN_WINOGRAD_AVX512
    if (level == Simd::avx512)
      use(in_tile_avx512<S>, out_tile_avx512<S>, grad_tile_avx512<S>, wt_row_avx512<S>, wgrad_row_avx512<S>);
#endif
    (void)level;
  }

 private:
  void use(decltype(in) i, decltype(out) o, decltype(grad) g, decltype(wt) w, decltype(wgrad) wg) {
    in = i;
    out = o;
    grad = g;
    wt = w;
    wgrad = wg;
  }
};

}  // namespace kiln::ops::winograd::kernels
