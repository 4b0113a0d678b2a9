// Winograd F(2x2, 3x3) on the CPU: transforms here, GEMMs in oneDNN's matmul. See winograd.h.
//
// Scratch layouts, per chunk of `tc` tiles (a tile t = (n, ty, tx) covers output rows 2ty, 2ty+1
// and columns 2tx, 2tx+1; tiles are numbered n-major, then ty, then tx):
//   V [16][tc][C]   transformed input tiles (operand dtype)  - the GEMM's A, row-major
//   U [16][C][K]    transformed weights (operand dtype)     - the GEMM's B
//   M [16][tc][K]   products, f32                           - the GEMM's C
//   Z [16][tc][K]   transformed output-gradient tiles (backward-weights), read transposed
//   dU [16][K][C]   f32, accumulated over chunks (matmul with a sum post-op)
// Position p = 4 * i + j indexes the 4x4 transformed tile. The per-tile transform kernels are in
// winograd_kernels.h; here, the drivers that walk the tiles, the chunking and the GEMMs.
#include "core/cpu/winograd.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dnnl_context.h"
#include "core/cpu/winograd_kernels.h"
#include "core/ops/bf16_rows.h"

namespace kiln::ops::winograd {

using dnnl::memory;
using namespace kernels;

namespace {

std::atomic<int64_t> g_chunk_bytes{int64_t{8} << 20};
// Scratch per thread for thread-private chunks (about the size of a core's L2).
std::atomic<int64_t> g_private_bytes{int64_t{1536} << 10};

// The best transform kernels this CPU runs: AVX-512 with AVX-512 BF16, else AVX2, else the portable
// loops.
Simd best_simd() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512bf16")) return Simd::avx512;
  if (__builtin_cpu_supports("avx2")) return Simd::avx2;
#endif
  return Simd::portable;
}

bool use_avx512() { return best_simd() == Simd::avx512; }

struct Tiles {
  int64_t n, h, w, th, tw;
  Tiles(int64_t n_, int64_t h_, int64_t w_) : n(n_), h(h_), w(w_), th((h_ + 1) / 2), tw((w_ + 1) / 2) {}
  int64_t count() const { return n * th * tw; }
  // The pixel (row, col) of image n, or nullptr outside the image (zero padding).
  template <typename S>
  S* at(S* base, int64_t n_, int64_t row, int64_t col, int64_t c) const {
    return row >= 0 && row < h && col >= 0 && col < w ? base + ((n_ * h + row) * w + col) * c : nullptr;
  }
};

// Tiles per chunk: the chunk's scratch (`bytes_per_tile` each) stays near g_chunk_bytes, so the
// transforms and the GEMM work on data the last-level cache still holds, but never fewer than 128
// tiles (the GEMMs get too thin).
// Chunks are balanced: 512 tiles at 170 per chunk run as 171 + 171 + 170, not 170 x 3 + 2.
int64_t chunk_tiles(const Tiles& t, int64_t bytes_per_tile) {
  int64_t c = std::max<int64_t>(128, g_chunk_bytes.load() / std::max<int64_t>(1, bytes_per_tile));
  if (c >= t.count()) return t.count();
  const int64_t chunks = (t.count() + c - 1) / c;
  return (t.count() + chunks - 1) / chunks;
}

// The level the transforms run at: KILN_WINOGRAD_SIMD (portable, avx2, avx512; a level the CPU
// lacks falls back to the best it has), else best_simd(); set_simd() changes it.
Simd initial_simd() {
  const Simd best = best_simd();
  const char* e = std::getenv("KILN_WINOGRAD_SIMD");
  if (!e) return best;
  const std::string v(e);
  if (v != "portable" && v != "avx2" && v != "avx512")
    std::fprintf(stderr, "kiln: warning: KILN_WINOGRAD_SIMD=%s is none of portable, avx2, avx512; ignored\n", e);
  const Simd asked = v == "portable" ? Simd::portable : v == "avx2" ? Simd::avx2 : best;
  return static_cast<int>(asked) <= static_cast<int>(best) ? asked : best;
}

std::atomic<int> g_simd{-1};  // -1: not decided yet (initial_simd())

int simd_level() {
  int on = g_simd.load();
  if (on >= 0) return on;
  const int initial = static_cast<int>(initial_simd());
  // A set_simd() that came first wins.
  return g_simd.compare_exchange_strong(on, initial) ? initial : on;
}

template <typename S>
const Kernels<S>& kernels() {
  static const Kernels<S> levels[3] = {Kernels<S>(Simd::portable), Kernels<S>(Simd::avx2), Kernels<S>(Simd::avx512)};
  return levels[simd_level()];
}

bool parallel_worth(int64_t items, int64_t channels) { return items * channels * 16 > 32768; }

// f(tt, n, ty, tx) for the tiles t0 + tt, tt in [0, tc), split across threads when `parallel`.
template <typename F>
void for_tiles(const Tiles& T, int64_t t0, int64_t tc, int64_t channels, bool parallel, F f) {
#pragma omp parallel for schedule(static) if (parallel && parallel_worth(tc, channels))
  for (int64_t tt = 0; tt < tc; ++tt) {
    const int64_t t = t0 + tt, r = t % (T.th * T.tw);
    f(tt, t / (T.th * T.tw), r / T.tw, r % T.tw);
  }
}

// V[p][t - t0][c] for the tiles [t0, t0 + tc) of x (N, H, W, C).
template <typename S>
void input_transform(const S* x, const Tiles& T, int64_t C, int64_t t0, int64_t tc, S* V, bool parallel) {
  const auto& ker = kernels<S>();
  for_tiles(T, t0, tc, C, parallel, [&](int64_t tt, int64_t n, int64_t ty, int64_t tx) {
    const S* src[16];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) src[4 * i + j] = T.at(x, n, 2 * ty - 1 + i, 2 * tx - 1 + j, C);
    ker.in(src, C, V + tt * C, tc * C);
  });
}

// y (N, H, W, K) at the tiles [t0, t0 + tc) from M[p][t - t0][k].
template <typename S>
void output_transform(const float* M, const Tiles& T, int64_t K, int64_t t0, int64_t tc, const float* bias, S* y,
                      bool parallel) {
  const auto& ker = kernels<S>();
  for_tiles(T, t0, tc, K, parallel, [&](int64_t tt, int64_t n, int64_t ty, int64_t tx) {
    S* dst[4];
    for (int a = 0; a < 4; ++a) dst[a] = T.at(y, n, 2 * ty + a / 2, 2 * tx + a % 2, K);
    ker.out(M + tt * K, tc * K, K, bias, dst);
  });
}

// Z[p][t - t0][k] for the 2x2 tiles of dy (N, H, W, K).
template <typename S>
void grad_transform(const S* dy, const Tiles& T, int64_t K, int64_t t0, int64_t tc, S* Z, bool parallel) {
  const auto& ker = kernels<S>();
  for_tiles(T, t0, tc, K, parallel, [&](int64_t tt, int64_t n, int64_t ty, int64_t tx) {
    const S* g[4];
    for (int a = 0; a < 4; ++a) g[a] = T.at(dy, n, 2 * ty + a / 2, 2 * tx + a % 2, K);
    ker.grad(g, K, Z + tt * K, tc * K);
  });
}

// dst[c][r] = src[r][c] for a rows x cols matrix, in 32 x 32 blocks.
template <typename S>
void transpose(const S* src, int64_t rows, int64_t cols, S* dst) {
  constexpr int64_t B = 32;
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r0 = 0; r0 < rows; r0 += B)
    for (int64_t c0 = 0; c0 < cols; c0 += B)
      for (int64_t c = c0; c < std::min(cols, c0 + B); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + B); ++r) dst[c * rows + r] = src[r * cols + c];
}

// U[p][row][l] = (G g G^T)[p] for rows 0..rows-1, where g's 9 taps for a row are the vectors (over
// l, length L) `taps(row, q)`, q = 3r + s.
template <typename S, typename Taps>
void transform_weight_rows(int64_t rows, int64_t L, Taps taps, S* U) {
  const auto& ker = kernels<S>();
#pragma omp parallel for schedule(static) if (parallel_worth(rows, L))
  for (int64_t i = 0; i < rows; ++i) {
    const S* g[9];
    for (int q = 0; q < 9; ++q) g[q] = taps(i, q);
    ker.wt(g, L, U + i * L, rows * L);
  }
}

// The forward's B: U[p][c][k] with g[r][s] = w[k][r][s][c] (w is (K, 3, 3, C)). The weights are
// first transposed to (3, 3, C, K), so every transform row is contiguous in k.
template <typename S>
void forward_weights(const S* w, int64_t K, int64_t C, S* wt, S* U) {
  transpose(w, K, 9 * C, wt);  // wt[(3r+s) C + c][k]
  transform_weight_rows<S>(C, K, [&](int64_t c, int q) { return wt + (q * C + c) * K; }, U);
}

// Backward-data's B: U[p][k][c] with g[r][s] = w[k][2-r][2-s][c], contiguous in c.
template <typename S>
void backward_data_weights(const S* w, int64_t K, int64_t C, S* U) {
  transform_weight_rows<S>(K, C, [&](int64_t k, int q) { return w + (k * 9 + (8 - q)) * C; }, U);
}

// gw[k][r][s][c] = (G^T dU[.][k][c] G)[r][s].
template <typename S>
void weight_grad_transform(const float* dU, int64_t K, int64_t C, S* gw) {
  const auto& ker = kernels<S>();
#pragma omp parallel for schedule(static) if (parallel_worth(K, C))
  for (int64_t k = 0; k < K; ++k) {
    S* out[9];
    for (int q = 0; q < 9; ++q) out[q] = gw + (k * 9 + q) * C;
    ker.wgrad(dU + k * C, K * C, C, out);
  }
}

using MatmulPrim = onednn::CachedPrimitive<dnnl::matmul>;

// dst[16][m][n] (f32) (+)= op(a)[16][m][k] b[16][k][n]; op(a) reads a stored as [16][k][m] when
// `a_transposed`. `accumulate` adds to dst (a sum post-op). `serial`: a primitive for one thread,
// run by each thread of the thread-private chunks on its own data.
struct Matmul {
  std::shared_ptr<const MatmulPrim> p;
  memory::desc a_md, b_md, c_md;
  void run(const void* a, const void* b, void* c) const {
    const dnnl::engine& e = onednn::engine();
    onednn::SerialScope serial(serial_);
    onednn::execute(p->prim, p->pd,
                    {{DNNL_ARG_SRC, memory(a_md, e, const_cast<void*>(a))},
                     {DNNL_ARG_WEIGHTS, memory(b_md, e, const_cast<void*>(b))},
                     {DNNL_ARG_DST, memory(c_md, e, c)}});
  }
  bool serial_ = false;
};

// `b_transposed`: b is stored as [batch][n][k]; `c_dtype`: the dtype dst is written in (f32 unless
// asked: the im2col forward writes bf16 results directly).
Matmul batched_matmul(DType dtype, bool a_transposed, int64_t m, int64_t k, int64_t n, bool accumulate, bool serial,
                      int64_t batch = 16, bool b_transposed = false, DType c_dtype = DType::f32) {
  Matmul mm;
  memory::data_type dt = onednn::data_type(dtype);
  mm.a_md = memory::desc({batch, m, k}, dt, a_transposed ? memory::format_tag::acb : memory::format_tag::abc);
  mm.b_md = memory::desc({batch, k, n}, dt, b_transposed ? memory::format_tag::acb : memory::format_tag::abc);
  mm.c_md = memory::desc({batch, m, n}, onednn::data_type(c_dtype), memory::format_tag::abc);
  mm.serial_ = serial || 2.0 * static_cast<double>(batch * m) * static_cast<double>(k) * static_cast<double>(n) <
                             onednn::kSerialFlops;
  onednn::SerialScope scope(mm.serial_);  // the key and the primitive see the thread count it runs with
  onednn::CacheKey key("winograd_matmul");
  key.add(Shape{batch, m, k, n, a_transposed ? 1 : 0, accumulate ? 1 : 0, b_transposed ? 1 : 0}).add(dtype).add(c_dtype);
  mm.p = onednn::cache().get_or_create<MatmulPrim>(key, [&]() -> std::shared_ptr<const MatmulPrim> {
    try {
      dnnl::primitive_attr attr = onednn::make_attr();  // not a copy of attr(): see dnnl_context.h
      if (accumulate) {
        dnnl::post_ops po;
        po.append_sum(1.0f);
        attr.set_post_ops(po);
      }
      return std::make_shared<const MatmulPrim>(
          dnnl::matmul::primitive_desc(dnnl::matmul::desc(mm.a_md, mm.b_md, mm.c_md), attr, onednn::engine()));
    } catch (const dnnl::error& e) {
      KILN_FAIL("conv2d (winograd): oneDNN could not create a batched matmul ", batch, " x (", m, " x ", k, ") x (", k,
                " x ", n, "): ", e.what());
    }
  });
  return mm;
}

template <typename S>
S* ptr(const Tensor& t) {
  if constexpr (std::is_same_v<S, float>)
    return t.data<float>();
  else
    return t.data_u16();
}

// Runs body(chunk, first tile, tiles, thread) over the chunks of `tiles` tiles: thread-private
// (each OpenMP thread takes whole chunks, transforms and GEMM on one core, the chunk in its L2)
// when `private_chunks`, else one chunk after the other with every thread in each step.
// Exceptions inside the parallel region are carried out of it.
template <typename F>
void for_chunks(int64_t count, int64_t tiles, bool private_chunks, int nthr, F body) {
  const int64_t chunks = (count + tiles - 1) / tiles;
  if (!private_chunks) {
    for (int64_t c = 0; c < chunks; ++c) body(c * tiles, std::min(tiles, count - c * tiles), 0);
    return;
  }
  std::exception_ptr err;
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(nthr)
  {
    const int tid = omp_get_thread_num(), n = omp_get_num_threads();
    for (int64_t c = tid; c < chunks && !failed.load(); c += n) {
      try {
        body(c * tiles, std::min(tiles, count - c * tiles), tid);
      } catch (...) {
#pragma omp critical(kiln_winograd_error)
        if (!err) err = std::current_exception();
        failed.store(true);
      }
    }
  }
  if (err) std::rethrow_exception(err);
}

// How to cut `count` tiles of `bytes_per_tile` scratch each: thread-private chunks where at least
// 128 tiles fit the per-thread budget and every thread gets at least one chunk; else shared chunks.
struct Plan {
  bool private_chunks;
  int nthr;
  int64_t tiles;
};
Plan plan(const Tiles& T, int64_t bytes_per_tile) {
  Plan p{false, omp_get_max_threads(), 0};
  const int64_t fit = g_private_bytes.load() / std::max<int64_t>(1, bytes_per_tile);
  if (p.nthr > 1 && !omp_in_parallel() && fit >= 128 && T.count() >= 2 * fit * p.nthr) {
    p.private_chunks = true;
    p.tiles = fit;
  } else {
    p.nthr = 1;
    p.tiles = chunk_tiles(T, bytes_per_tile);
  }
  return p;
}

// y (N, H, W, K) = the 3x3 pad-1 convolution of x (N, H, W, C) with transformed weights U [16][C][K]
// (+ bias, K floats, when given).
template <typename S>
Tensor convolve(const Tensor& x, const Tensor& U, int64_t K, const float* bias = nullptr) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const Tiles T(N, H, W);
  Tensor y = Tensor::empty({N, H, W, K}, x.dtype());
  const int64_t es = static_cast<int64_t>(sizeof(S));
  const Plan pl = plan(T, 16 * (C * es + K * 4));
  const int64_t last = T.count() - (T.count() - 1) / pl.tiles * pl.tiles;  // tiles in the last chunk
  const Matmul full = batched_matmul(x.dtype(), false, pl.tiles, C, K, false, pl.private_chunks);
  const Matmul tail = batched_matmul(x.dtype(), false, last, C, K, false, pl.private_chunks);
  Tensor V = Tensor::empty({pl.nthr, 16, pl.tiles, C}, x.dtype());
  Tensor M = Tensor::empty({pl.nthr, 16, pl.tiles, K}, DType::f32);
  const S* xp = ptr<S>(x);
  S* yp = ptr<S>(y);
  for_chunks(T.count(), pl.tiles, pl.private_chunks, pl.nthr, [&](int64_t t0, int64_t tc, int tid) {
    S* v = ptr<S>(V) + tid * 16 * pl.tiles * C;
    float* m = M.data<float>() + tid * 16 * pl.tiles * K;
    input_transform<S>(xp, T, C, t0, tc, v, !pl.private_chunks);
    (tc == pl.tiles ? full : tail).run(v, ptr<S>(U), m);
    output_transform<S>(m, T, K, t0, tc, bias, yp, !pl.private_chunks);
  });
  return y;
}

template <typename S>
Tensor weights_grad(const Tensor& gy, const Tensor& x) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3), K = gy.size(3);
  const Tiles T(N, H, W);
  const int64_t es = static_cast<int64_t>(sizeof(S));
  const Plan pl = plan(T, 16 * (C + K) * es);
  const int64_t last = T.count() - (T.count() - 1) / pl.tiles * pl.tiles;
  const Matmul full = batched_matmul(x.dtype(), true, K, pl.tiles, C, true, pl.private_chunks);
  const Matmul tail = batched_matmul(x.dtype(), true, K, last, C, true, pl.private_chunks);
  Tensor V = Tensor::empty({pl.nthr, 16, pl.tiles, C}, x.dtype());
  Tensor Z = Tensor::empty({pl.nthr, 16, pl.tiles, K}, x.dtype());
  Tensor dU = Tensor::zeros({pl.nthr, 16, K, C}, DType::f32);  // one accumulator per thread
  const S* xp = ptr<S>(x);
  const S* gp = ptr<S>(gy);
  for_chunks(T.count(), pl.tiles, pl.private_chunks, pl.nthr, [&](int64_t t0, int64_t tc, int tid) {
    S* v = ptr<S>(V) + tid * 16 * pl.tiles * C;
    S* z = ptr<S>(Z) + tid * 16 * pl.tiles * K;
    input_transform<S>(xp, T, C, t0, tc, v, !pl.private_chunks);
    grad_transform<S>(gp, T, K, t0, tc, z, !pl.private_chunks);
    (tc == pl.tiles ? full : tail).run(z, v, dU.data<float>() + tid * 16 * K * C);
  });
  float* du = dU.data<float>();
  const int64_t n = 16 * K * C;
  for (int t = 1; t < pl.nthr; ++t) {
    const float* o = du + t * n;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) du[i] += o[i];
  }
  Tensor gw = Tensor::empty({K, 3, 3, C}, x.dtype());
  weight_grad_transform<S>(du, K, C, ptr<S>(gw));
  return gw;
}

// The geometry of a general im2col convolution: x (N, H, W, C), w (K, KH, KW, C), stride and pad
// per axis, dilation 1, one group; the output is (N, OH, OW, K).
struct Im2col {
  int64_t N, H, W, C, K, KH, KW, sh, sw, ph, pw, OH, OW;
  int64_t row() const { return KH * KW * C; }     // one row of col: (r, s, c)
  int64_t pixels() const { return OH * OW; }       // output pixels per image
  // Whole images per chunk: a chunk's col (`bytes` per value) stays near g_chunk_bytes, at least one
  // image; balanced like the Winograd chunks.
  int64_t images_per_chunk(int64_t bytes) const {
    const int64_t per_image = std::max<int64_t>(1, pixels() * row() * bytes);
    const int64_t c = std::clamp<int64_t>(g_chunk_bytes.load() / per_image, 1, N);
    const int64_t chunks = (N + c - 1) / c;
    return (N + chunks - 1) / chunks;
  }
};

// col[q - q0][(r, s, c)] = x[n][oy*sh - ph + r][ox*sw - pw + s][c] (zero outside) for the output
// pixels q = (n, oy, ox) in [q0, q0 + rows).
template <typename S>
void gather_columns(const S* x, const Im2col& g, int64_t q0, int64_t rows, S* col) {
  const int64_t row = g.row();
  const size_t cb = static_cast<size_t>(g.C) * sizeof(S);
#pragma omp parallel for schedule(static) if (rows * row > 65536)
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t q = q0 + i, n = q / g.pixels(), oy = q / g.OW % g.OH, ox = q % g.OW;
    S* out = col + i * row;
    for (int64_t r = 0; r < g.KH; ++r) {
      const int64_t iy = oy * g.sh - g.ph + r;
      for (int64_t s2 = 0; s2 < g.KW; ++s2) {
        const int64_t ix = ox * g.sw - g.pw + s2;
        S* o = out + (r * g.KW + s2) * g.C;
        if (iy >= 0 && iy < g.H && ix >= 0 && ix < g.W)
          std::memcpy(o, x + ((n * g.H + iy) * g.W + ix) * g.C, cb);
        else
          std::memset(o, 0, cb);
      }
    }
  }
}

// y (N*OH*OW, K) = col (N*OH*OW, KH*KW*C) . w^T, over chunks of whole images; the GEMM writes y in
// x's dtype (f32 accumulation inside).
template <typename S>
Tensor im2col_conv(const Tensor& x, const Tensor& w, const Im2col& g) {
  const int64_t es = static_cast<int64_t>(sizeof(S));
  const int64_t ipc = g.images_per_chunk(es), last = g.N - (g.N - 1) / ipc * ipc;
  const Matmul full = batched_matmul(x.dtype(), false, ipc * g.pixels(), g.row(), g.K, false, false, 1, true, x.dtype());
  const Matmul tail =
      batched_matmul(x.dtype(), false, last * g.pixels(), g.row(), g.K, false, false, 1, true, x.dtype());
  Tensor col = Tensor::empty({ipc * g.pixels(), g.row()}, x.dtype());
  Tensor y = Tensor::empty({g.N, g.OH, g.OW, g.K}, x.dtype());
  for (int64_t n0 = 0; n0 < g.N; n0 += ipc) {
    const int64_t nc = std::min(ipc, g.N - n0);
    gather_columns<S>(ptr<S>(x), g, n0 * g.pixels(), nc * g.pixels(), ptr<S>(col));
    (nc == ipc ? full : tail).run(ptr<S>(col), ptr<S>(w), ptr<S>(y) + n0 * g.pixels() * g.K);
  }
  return y;
}

// dx[n][iy][ix][c] = sum over the (oy, r) with oy*sh - ph + r = iy and (ox, s) likewise of
// dcol[(n, oy, ox)][(r, s, c)], where dcol (N*OH*OW, KH*KW*C) = dy (N*OH*OW, K) . w (K, KH*KW*C) in
// f32, over chunks of whole images (so every input pixel's terms are in its chunk: a gather, no
// scatter). Sums in f32, one rounding to the dtype.
template <typename S>
Tensor im2col_conv_backward_data(const Tensor& gy, const Tensor& w, const Im2col& g) {
  const int64_t ipc = g.images_per_chunk(4), last = g.N - (g.N - 1) / ipc * ipc;
  const Matmul full = batched_matmul(gy.dtype(), false, ipc * g.pixels(), g.K, g.row(), false, false, 1);
  const Matmul tail = batched_matmul(gy.dtype(), false, last * g.pixels(), g.K, g.row(), false, false, 1);
  Tensor dcol = Tensor::empty({ipc * g.pixels(), g.row()}, DType::f32);
  Tensor dx = Tensor::empty({g.N, g.H, g.W, g.C}, gy.dtype());
  const float* dc = dcol.data<float>();
  S* dxp = ptr<S>(dx);
  const int64_t C = g.C, row = g.row();
  for (int64_t n0 = 0; n0 < g.N; n0 += ipc) {
    const int64_t nc = std::min(ipc, g.N - n0);
    (nc == ipc ? full : tail).run(ptr<S>(gy) + n0 * g.pixels() * g.K, ptr<S>(w), dcol.data<float>());
    const int64_t px = nc * g.H * g.W;
#pragma omp parallel if (px * C > 65536)
    {
      std::vector<float> acc(std::is_same_v<S, float> ? 0 : static_cast<size_t>(C));
#pragma omp for schedule(static)
      for (int64_t i = 0; i < px; ++i) {
        const int64_t n = i / (g.H * g.W), iy = i / g.W % g.H, ix = i % g.W;
        float* a = std::is_same_v<S, float> ? reinterpret_cast<float*>(dxp) + (n0 * g.H * g.W + i) * C : acc.data();
        bool any = false;
        for (int64_t r = 0; r < g.KH; ++r) {
          const int64_t ty = iy + g.ph - r;
          if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.OH) continue;
          for (int64_t s2 = 0; s2 < g.KW; ++s2) {
            const int64_t tx = ix + g.pw - s2;
            if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.OW) continue;
            const float* src = dc + ((n * g.OH + ty / g.sh) * g.OW + tx / g.sw) * row + (r * g.KW + s2) * C;
            if (any) {
              for (int64_t c = 0; c < C; ++c) a[c] += src[c];
            } else {
              std::memcpy(a, src, static_cast<size_t>(C) * sizeof(float));
              any = true;
            }
          }
        }
        if (!any) std::memset(a, 0, static_cast<size_t>(C) * sizeof(float));
        if constexpr (!std::is_same_v<S, float>) ops::f32_to_bf16(a, dxp + (n0 * g.H * g.W + i) * C, C);
      }
    }
  }
  return dx;
}

// gw (K, 3, 3, C) = dy^T col, col[(n, oy, ox)][(r, s, c)] = x[n][oy*stride-pad+r][ox*stride-pad+s][c]
// (zero outside), over chunks of output pixels of about 8 MiB of col, accumulated in f32.
template <typename S>
Tensor im2col_weights_grad(const Tensor& gy, const Tensor& x, int64_t stride, int64_t pad) {
  const Im2col g{x.size(0), x.size(1), x.size(2), x.size(3), gy.size(3), 3, 3, stride, stride, pad, pad,
                 gy.size(1), gy.size(2)};
  const int64_t P = g.N * g.pixels(), row = g.row(), K = g.K;
  const int64_t es = static_cast<int64_t>(sizeof(S));
  const int64_t pc_max = std::min(P, std::max<int64_t>(256, g_chunk_bytes.load() / (row * es)));
  const int64_t last = P - (P - 1) / pc_max * pc_max;
  const Matmul full = batched_matmul(x.dtype(), true, K, pc_max, row, true, false, 1);
  const Matmul tail = batched_matmul(x.dtype(), true, K, last, row, true, false, 1);
  Tensor col = Tensor::empty({pc_max, row}, x.dtype());
  Tensor dW = Tensor::zeros({K, row}, DType::f32);
  const S* gp = ptr<S>(gy);
  for (int64_t p0 = 0; p0 < P; p0 += pc_max) {
    const int64_t pc = std::min(pc_max, P - p0);
    gather_columns<S>(ptr<S>(x), g, p0, pc, ptr<S>(col));
    (pc == pc_max ? full : tail).run(gp + p0 * K, ptr<S>(col), dW.data<float>());
  }
  return dW.reshape({K, 3, 3, g.C}).to(x.dtype());
}

void check(const Tensor& a, const char* what_a, const Tensor& b, const char* what_b) {
  KILN_CHECK(a.device().is_cpu() && b.device().is_cpu() && a.is_contiguous() && b.is_contiguous() && a.dim() == 4 &&
                 b.dim() == 4 && a.dtype() == b.dtype() && (a.dtype() == DType::f32 || a.dtype() == DType::bf16),
             "conv2d (winograd): ", what_a, " ", a.str(), " and ", what_b, " ", b.str(),
             " must be contiguous 4-D CPU tensors of one dtype, f32 or bf16");
}

}  // namespace

void set_chunk_bytes(int64_t bytes) { g_chunk_bytes.store(std::max<int64_t>(1, bytes)); }

void set_private_bytes(int64_t bytes) { g_private_bytes.store(std::max<int64_t>(0, bytes)); }

bool set_simd(Simd level) {
  if (static_cast<int>(level) > static_cast<int>(best_simd())) return false;
  g_simd.store(static_cast<int>(level));
  return true;
}

Simd simd() { return static_cast<Simd>(simd_level()); }

bool applicable(int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                int64_t dil_h, int64_t dil_w, int64_t groups, bool bias, DType dtype) {
  (void)bias;  // added in the output transform; its gradient is dy summed over N, H, W
  return kh == 3 && kw == 3 && stride_h == 1 && stride_w == 1 && pad_h == 1 && pad_w == 1 && dil_h == 1 &&
         dil_w == 1 && groups == 1 && (dtype == DType::f32 || dtype == DType::bf16);
}

bool chosen(int64_t ic, int64_t oc, DType dtype) {
  switch (mode()) {
    case Mode::direct:
      return false;
    case Mode::winograd:
      return true;
    case Mode::automatic:
    case Mode::heuristic:
      break;
  }
  // Measured with `kiln bench winograd` (docs/precision.md): bf16 wins 1.2-1.5x from 64 channels
  // (batch 32 and 128, 32x32 down to 4x4); f32, whose transformed tiles take twice the memory,
  // loses at 64 channels and wins 1.3-1.7x from 128. The rule was tuned there alone: elsewhere
  // (AVX2, where the AVX2 transforms win from 64 channels at 32x32 but not at 7x7) it keeps
  // oneDNN's direct kernels, and the automatic mode measures instead.
  if (!use_avx512()) return false;
  if (dtype == DType::bf16) return ic >= 64 && oc >= 64;
  return ic >= 128 && oc >= 128;
}

Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b) {
  check(x, "input", w, "weight");
  KILN_CHECK(w.size(1) == 3 && w.size(2) == 3 && w.size(3) == x.size(3), "conv2d (winograd): weight ", w.str(),
             " must be (K, 3, 3, C) for input ", x.str());
  const int64_t K = w.size(0), C = w.size(3);
  KILN_CHECK(!b.defined() || (b.dtype() == x.dtype() && b.numel() == K), "conv2d (winograd): bias ", b.str(),
             " must hold ", K, " values of the input's dtype");
  const Tensor bias = b.defined() ? b.to(DType::f32).contiguous() : Tensor();  // added in f32
  const float* bp = b.defined() ? bias.data<float>() : nullptr;
  Tensor U = Tensor::empty({16, C, K}, x.dtype());
  Tensor wt = Tensor::empty({9, C, K}, x.dtype());
  if (x.dtype() == DType::f32) {
    forward_weights<float>(w.data<float>(), K, C, wt.data<float>(), U.data<float>());
    return convolve<float>(x, U, K, bp);
  }
  forward_weights<uint16_t>(w.data_u16(), K, C, wt.data_u16(), U.data_u16());
  return convolve<uint16_t>(x, U, K, bp);
}

Tensor backward_data(const Tensor& gy, const Tensor& w) {
  check(gy, "output gradient", w, "weight");
  KILN_CHECK(w.size(1) == 3 && w.size(2) == 3 && w.size(0) == gy.size(3), "conv2d (winograd): weight ", w.str(),
             " must be (K, 3, 3, C) for output gradient ", gy.str());
  const int64_t K = w.size(0), C = w.size(3);
  Tensor U = Tensor::empty({16, K, C}, gy.dtype());
  if (gy.dtype() == DType::f32) {
    backward_data_weights<float>(w.data<float>(), K, C, U.data<float>());
    return convolve<float>(gy, U, C);
  }
  backward_data_weights<uint16_t>(w.data_u16(), K, C, U.data_u16());
  return convolve<uint16_t>(gy, U, C);
}

Tensor backward_weights(const Tensor& gy, const Tensor& x) {
  check(gy, "output gradient", x, "input");
  KILN_CHECK(gy.size(0) == x.size(0) && gy.size(1) == x.size(1) && gy.size(2) == x.size(2),
             "conv2d (winograd): output gradient ", gy.str(), " must match input ", x.str(), " in N, H and W");
  return x.dtype() == DType::f32 ? weights_grad<float>(gy, x) : weights_grad<uint16_t>(gy, x);
}

bool im2col_chosen(int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                   int64_t dil_h, int64_t dil_w, int64_t groups, int64_t ic, int64_t oc, DType dtype) {
  if (mode() == Mode::direct || !use_avx512()) return false;
  return kh == 3 && kw == 3 && stride_h == 2 && stride_w == 2 && pad_h == 1 && pad_w == 1 && dil_h == 1 &&
         dil_w == 1 && groups == 1 && ic >= 64 && oc >= 64 && (dtype == DType::f32 || dtype == DType::bf16);
}

Tensor im2col_backward_weights(const Tensor& gy, const Tensor& x, int64_t stride, int64_t pad) {
  check(gy, "output gradient", x, "input");
  KILN_CHECK(gy.size(0) == x.size(0) && gy.size(1) == (x.size(1) + 2 * pad - 3) / stride + 1 &&
                 gy.size(2) == (x.size(2) + 2 * pad - 3) / stride + 1,
             "conv2d (im2col): output gradient ", gy.str(), " does not fit input ", x.str(), " with a 3x3 kernel, stride ",
             stride, ", pad ", pad);
  return x.dtype() == DType::f32 ? im2col_weights_grad<float>(gy, x, stride, pad)
                                 : im2col_weights_grad<uint16_t>(gy, x, stride, pad);
}

namespace {
Im2col im2col_geometry(const Shape& xs, const Shape& ws, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                       const char* what) {
  KILN_CHECK(xs.size() == 4 && ws.size() == 4 && ws[3] == xs[3] && sh >= 1 && sw >= 1 && ph >= 0 && pw >= 0 &&
                 xs[1] + 2 * ph >= ws[1] && xs[2] + 2 * pw >= ws[2],
             "conv2d (im2col ", what, "): input ", shape_str(xs), " and weight ", shape_str(ws),
             " must be (N, H, W, C) and (K, KH, KW, C) with the kernel inside the padded input (stride ", sh, "x", sw,
             ", pad ", ph, "x", pw, ")");
  return {xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], sh, sw, ph, pw,
          (xs[1] + 2 * ph - ws[1]) / sh + 1, (xs[2] + 2 * pw - ws[2]) / sw + 1};
}
}  // namespace

Tensor im2col_forward(const Tensor& x, const Tensor& w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                      int64_t pad_w) {
  check(x, "input", w, "weight");
  const Im2col g = im2col_geometry(x.shape(), w.shape(), stride_h, stride_w, pad_h, pad_w, "forward");
  return x.dtype() == DType::f32 ? im2col_conv<float>(x, w, g) : im2col_conv<uint16_t>(x, w, g);
}

Tensor im2col_backward_data(const Tensor& gy, const Tensor& w, const Shape& x_shape, int64_t stride_h,
                            int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  check(gy, "output gradient", w, "weight");
  const Im2col g = im2col_geometry(x_shape, w.shape(), stride_h, stride_w, pad_h, pad_w, "backward-data");
  KILN_CHECK(gy.size(0) == g.N && gy.size(1) == g.OH && gy.size(2) == g.OW && gy.size(3) == g.K,
             "conv2d (im2col backward-data): output gradient ", gy.str(), " must be (", g.N, ", ", g.OH, ", ", g.OW,
             ", ", g.K, ") for input ", shape_str(x_shape), " and weight ", w.str());
  return gy.dtype() == DType::f32 ? im2col_conv_backward_data<float>(gy, w, g)
                                  : im2col_conv_backward_data<uint16_t>(gy, w, g);
}

}  // namespace kiln::ops::winograd
