// Winograd F(2x2,3x3) convolution (core/cpu/winograd.cpp): the three passes against a
// double-precision direct convolution (f32: tight; bf16: no worse than a few times oneDNN's direct
// bf16 convolution on the same inputs), odd sizes, several chunks, and conv2d's routing.
#include "core/cpu/winograd.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/cpu/winograd_kernels.h"
#include "core/dtype.h"

#include "core/autograd.h"
#include "core/dnnl_context.h"
#include "core/ops/conv2d.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::randn;
namespace wg = kiln::ops::winograd;

namespace {

struct Geo {
  const char* name;
  int64_t n, h, w, c, k;
};

const std::vector<Geo>& geos() {
  static const std::vector<Geo> g = {
      {"even", 2, 6, 8, 5, 7},
      {"odd", 2, 5, 7, 3, 4},                     // the last tile row and column hang over the image
      {"one_pixel", 3, 1, 1, 4, 5},               // only the centre tap touches the image
      {"one_row", 1, 1, 6, 6, 3},
      {"channels_past_a_block", 1, 4, 3, 70, 66},  // transforms work in blocks of 64 channels
      {"square", 1, 8, 8, 16, 16},
  };
  return g;
}

struct Ref {
  std::vector<double> y, gx, gw;
};

// 3x3, stride 1, pad 1 convolution of x (N,H,W,C) with w (K,3,3,C), and its gradients for gy.
Ref reference(const Geo& g, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& gy) {
  Ref r;
  r.y.assign(g.n * g.h * g.w * g.k, 0.0);
  r.gx.assign(x.size(), 0.0);
  r.gw.assign(w.size(), 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t i = 0; i < g.h; ++i)
      for (int64_t j = 0; j < g.w; ++j)
        for (int64_t o = 0; o < g.k; ++o) {
          int64_t yi = ((n * g.h + i) * g.w + j) * g.k + o;
          double acc = 0.0, d = gy[yi];
          for (int64_t a = 0; a < 3; ++a)
            for (int64_t b = 0; b < 3; ++b) {
              int64_t ih = i - 1 + a, iw = j - 1 + b;
              if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
              for (int64_t c = 0; c < g.c; ++c) {
                int64_t xi = ((n * g.h + ih) * g.w + iw) * g.c + c;
                int64_t wi = ((o * 3 + a) * 3 + b) * g.c + c;
                acc += x[xi] * w[wi];
                r.gx[xi] += d * w[wi];
                r.gw[wi] += d * x[xi];
              }
            }
          r.y[yi] = acc;
        }
  return r;
}

struct ModeGuard {
  wg::Mode prev = wg::mode();
  explicit ModeGuard(wg::Mode m) { wg::set_mode(m); }
  ~ModeGuard() { wg::set_mode(prev); }
};

struct ChunkGuard {
  explicit ChunkGuard(int64_t bytes) { wg::set_chunk_bytes(bytes); }
  ~ChunkGuard() { wg::set_chunk_bytes(int64_t{8} << 20); }
};

void check_f32(const Geo& g, uint64_t seed) {
  Tensor x = randn({g.n, g.h, g.w, g.c}, seed), w = randn({g.k, 3, 3, g.c}, seed + 1, DType::f32, 0.5);
  Tensor gy = randn({g.n, g.h, g.w, g.k}, seed + 2);
  Ref r = reference(g, x.to_double_vector(), w.to_double_vector(), gy.to_double_vector());
  // The transforms scale values by up to 4 before the f32 GEMM, so the f32 bound of a direct
  // convolution (2e-5 per summed product) is taken 4 times.
  double tol = 8e-5 * static_cast<double>(9 * std::max(g.c, g.k) + 1);
  expect_close(wg::forward(x, w), r.y, tol, 1e-5, std::string(g.name) + " y");
  expect_close(wg::backward_data(gy, w), r.gx, tol, 1e-5, std::string(g.name) + " dx");
  expect_close(wg::backward_weights(gy, x), r.gw, 8e-5 * static_cast<double>(g.n * g.h * g.w + 1), 1e-5,
               std::string(g.name) + " dw");
}

// max |t - ref| / rms(ref)
double rel_err(const Tensor& t, const std::vector<double>& ref) {
  std::vector<double> v = t.to_double_vector();
  double e = 0.0, s = 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    e = std::max(e, std::fabs(v[i] - ref[i]));
    s += ref[i] * ref[i];
  }
  return e / std::sqrt(s / static_cast<double>(v.size()));
}

}  // namespace

TEST(Winograd, F32MatchesDirectReference) {
  uint64_t seed = 100;
  for (const Geo& g : geos()) {
    SCOPED_TRACE(g.name);
    check_f32(g, seed += 10);
  }
}

TEST(Winograd, SeveralChunksGiveTheSameAnswer) {
  ChunkGuard tiny(1);  // 128 tiles per chunk: 3 x 8 x 8 x 4 = 192 tiles -> a full and a partial chunk
  check_f32({"chunks", 3, 16, 16, 6, 5}, 7);
}

TEST(Winograd, ThreadPrivateChunksGiveTheSameAnswer) {
  // 4 x 16 x 16 = 1024 tiles of 16 x (6 x 4 + 5 x 4) bytes (f32 forward): a budget of 128 tiles per
  // thread gives each of 2 threads several chunks (the last one partial: W = 31).
  const int prev = omp_get_max_threads();
  omp_set_num_threads(2);
  wg::set_private_bytes(128 * 16 * (6 + 5) * 4);
  check_f32({"private", 4, 32, 31, 6, 5}, 9);
  wg::set_private_bytes(int64_t{1536} << 10);
  omp_set_num_threads(prev);
}

TEST(Winograd, SimdAndPortableKernelsAgree) {
  // The AVX2 and AVX-512 transforms and the portable loops compute the same expressions: the same
  // bits, for bf16 (rounding included) and f32, with channel counts that leave vector tails (21 and
  // 19: 2 vectors of 8 or 1 of 16, and the rest in the portable loop).
  const wg::Simd before = wg::simd();
  int compared = 0;
  for (DType t : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(t));
    // oneDNN has no bf16 matmul for Winograd's GEMMs on a CPU without native bf16 (AVX2 only).
    if (t == DType::bf16 && !onednn::native_compute(DType::bf16)) continue;
    Tensor x = randn({2, 7, 6, 21}, 41, t), w = randn({19, 3, 3, 21}, 42, t, 0.3), gy = randn({2, 7, 6, 19}, 43, t);
    std::vector<std::vector<double>> r[3];
    for (wg::Simd level : {wg::Simd::portable, wg::Simd::avx2, wg::Simd::avx512}) {
      if (!wg::set_simd(level)) continue;
      SCOPED_TRACE(static_cast<int>(level));
      auto& out = r[static_cast<int>(level)];
      out = {wg::forward(x, w).to_double_vector(), wg::backward_data(gy, w).to_double_vector(),
             wg::backward_weights(gy, x).to_double_vector()};
      if (level != wg::Simd::portable) {
        EXPECT_EQ(r[0], out);
        ++compared;
      }
    }
  }
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx512bf16")) {  // a level the CPU lacks is refused, changing nothing
    wg::set_simd(wg::Simd::portable);
    EXPECT_FALSE(wg::set_simd(wg::Simd::avx512));
    EXPECT_EQ(wg::simd(), wg::Simd::portable);
  }
#endif
  wg::set_simd(before);
  EXPECT_EQ(wg::simd(), before);
  if (compared == 0) GTEST_SKIP() << "neither AVX2 nor AVX-512 BF16 on this CPU";
}

template <typename S>
S to_storage(float v) {
  if constexpr (std::is_same_v<S, float>)
    return v;
  else
    return float_to_bf16(v);
}
template <typename S>
float from_storage(S v) {
  if constexpr (std::is_same_v<S, float>)
    return v;
  else
    return bf16_to_float(v);
}

// The transform kernels alone (no oneDNN: bf16 runs on any CPU), every level the CPU has against
// the portable loop, bit for bit: every tail length (1..40 lanes), zero padding (null rows), both
// zeros, infinities, subnormals, values that round to a bf16 tie. NaN must stay NaN (its payload
// may differ: x86 keeps the first NaN operand, and scalar and vector code order operands apart).
template <typename S>
void expect_kernels_bitwise_equal(wg::Simd level) {
  namespace kn = kiln::ops::winograd::kernels;
  const kn::Kernels<S> ref(wg::Simd::portable), got(level);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -3e-39f, NAN, 1.00390625f, 3.4e38f};
  auto value = [&] {
    const unsigned pick = rng() % 16;
    return pick < std::size(specials) ? specials[pick] : normal(rng);
  };
  auto fill = [&](int64_t n) {
    std::vector<S> v(static_cast<size_t>(n));
    for (auto& e : v) {
      e = to_storage<S>(value());
    }
    return v;
  };
  auto same = [](const auto& a, const auto& b, const char* what, int64_t n) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const float x = from_storage(a[i]), y = from_storage(b[i]);
      if (std::isnan(x) && std::isnan(y)) continue;
      ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(a[i])), 0)
          << what << ", " << n << " lanes, element " << i << ": " << x << " against " << y;
    }
  };
  for (int64_t n = 1; n <= 40; ++n) {
    const int64_t plane = n + 3;  // rows apart, with a gap that must stay untouched
    const S fillv = to_storage<S>(12345.0f);  // a row gap's sentinel
    std::vector<std::vector<S>> in(16);
    const S* src[16];
    for (int k = 0; k < 16; ++k) {
      in[k] = fill(n);
      src[k] = (k + n) % 5 == 0 ? nullptr : in[k].data();  // some padding rows
    }
    std::vector<S> a(static_cast<size_t>(16 * plane), fillv), b = a;
    ref.in(src, n, a.data(), plane);
    got.in(src, n, b.data(), plane);
    same(a, b, "in_tile", n);
    // The portable loop itself against B^T d B in scalar f32, stored as float_to_bf16 stores.
    std::vector<S> want(a.size(), fillv);
    for (int64_t c = 0; c < n; ++c) {
      float d[16], t[4][4];
      for (int k = 0; k < 16; ++k) d[k] = src[k] ? from_storage(src[k][c]) : 0.0f;
      for (int j = 0; j < 4; ++j) {
        t[0][j] = d[j] - d[8 + j];
        t[1][j] = d[4 + j] + d[8 + j];
        t[2][j] = d[8 + j] - d[4 + j];
        t[3][j] = d[4 + j] - d[12 + j];
      }
      for (int i = 0; i < 4; ++i) {
        want[(4 * i + 0) * plane + c] = to_storage<S>(t[i][0] - t[i][2]);
        want[(4 * i + 1) * plane + c] = to_storage<S>(t[i][1] + t[i][2]);
        want[(4 * i + 2) * plane + c] = to_storage<S>(t[i][2] - t[i][1]);
        want[(4 * i + 3) * plane + c] = to_storage<S>(t[i][1] - t[i][3]);
      }
    }
    same(want, a, "in_tile against scalar f32", n);

    std::vector<float> m(static_cast<size_t>(16 * plane)), bias(static_cast<size_t>(n));
    for (auto& e : m) e = value();
    for (auto& e : bias) e = value();
    for (const float* bp : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
      std::vector<std::vector<S>> ya(4, std::vector<S>(static_cast<size_t>(n), fillv)), yb = ya;
      S* pa[4];
      S* pb[4];
      for (int q = 0; q < 4; ++q) {
        const bool past = q == 3 && n % 2 == 0;  // past the image: no output
        pa[q] = past ? nullptr : ya[q].data();
        pb[q] = past ? nullptr : yb[q].data();
      }
      ref.out(m.data(), plane, n, bp, pa);
      got.out(m.data(), plane, n, bp, pb);
      for (int q = 0; q < 4; ++q) same(ya[q], yb[q], bp ? "out_tile (bias)" : "out_tile", n);
    }

    const S* g4[4] = {in[0].data(), n % 3 == 0 ? nullptr : in[1].data(), in[2].data(), in[3].data()};
    std::fill(a.begin(), a.end(), fillv);
    std::fill(b.begin(), b.end(), fillv);
    ref.grad(g4, n, a.data(), plane);
    got.grad(g4, n, b.data(), plane);
    same(a, b, "grad_tile", n);

    const S* g9[9];
    for (int q = 0; q < 9; ++q) g9[q] = in[q].data();
    std::fill(a.begin(), a.end(), fillv);
    std::fill(b.begin(), b.end(), fillv);
    ref.wt(g9, n, a.data(), plane);
    got.wt(g9, n, b.data(), plane);
    same(a, b, "wt_row", n);

    std::vector<std::vector<S>> oa(9, std::vector<S>(static_cast<size_t>(n), fillv)), ob = oa;
    S* qa[9];
    S* qb[9];
    for (int q = 0; q < 9; ++q) {
      qa[q] = oa[q].data();
      qb[q] = ob[q].data();
    }
    ref.wgrad(m.data(), plane, n, qa);
    got.wgrad(m.data(), plane, n, qb);
    for (int q = 0; q < 9; ++q) same(oa[q], ob[q], "wgrad_row", n);
  }
}

TEST(Winograd, SimdTransformKernelsAreBitwiseThePortableOnes) {
  const wg::Simd before = wg::simd();
  int compared = 0;
  for (wg::Simd level : {wg::Simd::avx2, wg::Simd::avx512}) {
    if (!wg::set_simd(level)) continue;  // only to ask whether the CPU has it
    SCOPED_TRACE(level == wg::Simd::avx2 ? "avx2" : "avx512");
    {
      SCOPED_TRACE("f32");
      expect_kernels_bitwise_equal<float>(level);
    }
    {
      SCOPED_TRACE("bf16");
      expect_kernels_bitwise_equal<uint16_t>(level);
    }
    ++compared;
  }
  wg::set_simd(before);
  if (compared == 0) GTEST_SKIP() << "neither AVX2 nor AVX-512 BF16 on this CPU";
}

TEST(Winograd, Bf16ErrorIsCloseToDirectBf16) {
  // The same bf16 inputs through oneDNN's direct bf16 kernels and through Winograd, both against
  // the exact (double) convolution of those inputs. Winograd also rounds its transformed tiles to
  // bf16, so it may be somewhat less accurate, but not by more than 3x, and within 4% of the
  // output's RMS (bf16 keeps 8 bits: its own rounding is 0.4% of a value).
  if (!onednn::native_compute(DType::bf16)) GTEST_SKIP() << "no native bf16 convolution on this CPU";
  for (const Geo& g : {Geo{"c64", 2, 8, 8, 64, 64}, Geo{"odd_c96", 2, 7, 5, 96, 80}}) {
    SCOPED_TRACE(g.name);
    Tensor x = randn({g.n, g.h, g.w, g.c}, 1, DType::bf16), w = randn({g.k, 3, 3, g.c}, 2, DType::bf16, 0.1);
    Tensor gy = randn({g.n, g.h, g.w, g.k}, 3, DType::bf16);
    Ref r = reference(g, x.to_double_vector(), w.to_double_vector(), gy.to_double_vector());
    Tensor dy, dx, dw;
    {
      ModeGuard direct(wg::Mode::direct);
      Tensor xr = x.clone(), wr = w.clone();
      xr.set_requires_grad(true);
      wr.set_requires_grad(true);
      dy = ops::conv2d(xr, wr, Tensor(), ops::Conv2dParams{1, 1, 1, 1, 1, 1, 1});
      dy.backward(gy);
      dx = xr.grad();
      dw = wr.grad();
    }
    Tensor y = wg::forward(x, w), gx = wg::backward_data(gy, w), gw = wg::backward_weights(gy, x);
    ASSERT_EQ(y.dtype(), DType::bf16);
    ASSERT_EQ(gw.dtype(), DType::bf16);
    struct Row {
      const char* what;
      const Tensor& wino;
      const Tensor& direct;
      const std::vector<double>& ref;
    };
    for (const Row& row : {Row{"y", y, dy, r.y}, Row{"dx", gx, dx, r.gx}, Row{"dw", gw, dw, r.gw}}) {
      double ew = rel_err(row.wino, row.ref), ed = rel_err(row.direct, row.ref);
      std::printf("%s %s: max error / rms: winograd %.4f, direct %.4f\n", g.name, row.what, ew, ed);
      EXPECT_LE(ew, 0.04) << row.what << ": winograd " << ew << ", direct " << ed;
      EXPECT_LE(ew, 3.0 * ed + 1e-3) << row.what << ": winograd " << ew << ", direct " << ed;
    }
  }
}

TEST(Winograd, Conv2dRoutesApplicableConvolutions) {
  // Under mode winograd, conv2d's forward and both gradients are Winograd's, bit for bit.
  ModeGuard on(wg::Mode::winograd);
  Tensor x = randn({2, 6, 6, 8}, 5), w = randn({12, 3, 3, 8}, 6, DType::f32, 0.5), gy = randn({2, 6, 6, 12}, 7);
  Tensor xr = x.clone(), wr = w.clone();
  xr.set_requires_grad(true);
  wr.set_requires_grad(true);
  ops::Conv2dParams p{1, 1, 1, 1, 1, 1, 1};
  Tensor y = ops::conv2d(xr, wr, Tensor(), p);
  y.backward(gy);
  auto same = [](const Tensor& a, const Tensor& b, const char* what) {
    EXPECT_EQ(a.to_double_vector(), b.to_double_vector()) << what;
  };
  same(y, wg::forward(x, w), "y");
  same(xr.grad(), wg::backward_data(gy, w), "dx");
  same(wr.grad(), wg::backward_weights(gy, x), "dw");
}

// The weight gradient of a strided 3x3 convolution by im2col + GEMM, against the double loop.
TEST(Im2colWeightsGrad, MatchesReferenceForStride2) {
  struct G {
    int64_t n, h, w, c, k, stride, pad;
  };
  ChunkGuard small(1);  // 256 output pixels per chunk: the larger case runs several chunks
  for (const G& g : {G{2, 7, 6, 5, 4, 2, 1}, G{3, 16, 15, 8, 6, 2, 1}, G{1, 5, 5, 3, 2, 2, 0}}) {
    SCOPED_TRACE(std::to_string(g.h) + "x" + std::to_string(g.w) + " stride " + std::to_string(g.stride));
    const int64_t oh = (g.h + 2 * g.pad - 3) / g.stride + 1, ow = (g.w + 2 * g.pad - 3) / g.stride + 1;
    Tensor x = randn({g.n, g.h, g.w, g.c}, 21), gy = randn({g.n, oh, ow, g.k}, 22);
    std::vector<double> xv = x.to_double_vector(), gv = gy.to_double_vector(), ref(g.k * 9 * g.c, 0.0);
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          for (int64_t o = 0; o < g.k; ++o)
            for (int64_t a = 0; a < 3; ++a)
              for (int64_t b = 0; b < 3; ++b) {
                int64_t ih = i * g.stride - g.pad + a, iw = j * g.stride - g.pad + b;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                for (int64_t c = 0; c < g.c; ++c)
                  ref[((o * 3 + a) * 3 + b) * g.c + c] +=
                      gv[((n * oh + i) * ow + j) * g.k + o] * xv[((n * g.h + ih) * g.w + iw) * g.c + c];
              }
    Tensor gw = wg::im2col_backward_weights(gy, x, g.stride, g.pad);
    ASSERT_EQ(gw.shape(), (Shape{g.k, 3, 3, g.c}));
    expect_close(gw, ref, 2e-5 * static_cast<double>(g.n * oh * ow + 1), 1e-5, "dw");
  }
}

// The general im2col forward and backward-data against a double-precision direct convolution:
// non-square kernels, strides and pads (a stride larger than the kernel leaves input pixels no
// output touches), odd sizes, f32 and bf16, one chunk and several.
TEST(Im2colConv, ForwardAndBackwardDataMatchReference) {
  struct G {
    int64_t n, h, w, c, k, kh, kw, sh, sw, ph, pw;
  };
  for (int64_t chunk : {int64_t{8} << 20, int64_t{1}}) {
    ChunkGuard guard(chunk);  // 1 byte: one image per chunk
    for (const G& g : {G{2, 7, 6, 5, 4, 3, 3, 2, 2, 1, 1}, G{3, 8, 8, 16, 12, 3, 3, 1, 1, 1, 1},
                       G{2, 9, 11, 3, 8, 7, 5, 2, 3, 3, 2}, G{1, 7, 7, 4, 3, 2, 2, 3, 3, 0, 0},
                       G{2, 5, 5, 70, 33, 3, 1, 2, 1, 0, 0}}) {
      const int64_t oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1, ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
      for (DType dt : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(std::to_string(g.h) + "x" + std::to_string(g.w) + " kernel " + std::to_string(g.kh) + "x" +
                     std::to_string(g.kw) + " stride " + std::to_string(g.sh) + "x" + std::to_string(g.sw) + " " +
                     dtype_name(dt) + (chunk == 1 ? ", one image per chunk" : ""));
        // bf16 operands are exact in f32, so the reference sees the values the kernels see.
        Tensor x = randn({g.n, g.h, g.w, g.c}, 41).to(dt), w = randn({g.k, g.kh, g.kw, g.c}, 42).to(dt);
        Tensor gy = randn({g.n, oh, ow, g.k}, 43).to(dt);
        const std::vector<double> xv = x.to_double_vector(), wv = w.to_double_vector(), gv = gy.to_double_vector();
        std::vector<double> y(g.n * oh * ow * g.k, 0.0), gx(xv.size(), 0.0);
        for (int64_t n = 0; n < g.n; ++n)
          for (int64_t i = 0; i < oh; ++i)
            for (int64_t j = 0; j < ow; ++j)
              for (int64_t o = 0; o < g.k; ++o)
                for (int64_t a = 0; a < g.kh; ++a)
                  for (int64_t b = 0; b < g.kw; ++b) {
                    const int64_t ih = i * g.sh - g.ph + a, iw = j * g.sw - g.pw + b;
                    if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                    for (int64_t c = 0; c < g.c; ++c) {
                      const int64_t xi = ((n * g.h + ih) * g.w + iw) * g.c + c, yi = ((n * oh + i) * ow + j) * g.k + o;
                      const double wt = wv[((o * g.kh + a) * g.kw + b) * g.c + c];
                      y[yi] += wt * xv[xi];
                      gx[xi] += wt * gv[yi];
                    }
                  }
        // f32: summation order only; bf16: one rounding of the result (2^-8 relative) on f32 sums.
        const double rel = dt == DType::f32 ? 1e-5 : 1.0 / 256;
        const double terms_y = static_cast<double>(g.kh * g.kw * g.c), terms_x = static_cast<double>(g.kh * g.kw * g.k);
        Tensor yk = wg::im2col_forward(x, w, g.sh, g.sw, g.ph, g.pw);
        ASSERT_EQ(yk.shape(), (Shape{g.n, oh, ow, g.k}));
        ASSERT_EQ(yk.dtype(), dt);
        expect_close(yk, y, 2e-6 * terms_y, rel, "y");
        Tensor gxk = wg::im2col_backward_data(gy, w, x.shape(), g.sh, g.sw, g.ph, g.pw);
        ASSERT_EQ(gxk.shape(), x.shape());
        ASSERT_EQ(gxk.dtype(), dt);
        expect_close(gxk, gx, 2e-6 * terms_x, rel, "gx");
      }
    }
  }
}

TEST(Im2colConv, ShapesThatDoNotFitAreRefusedNamingThem) {
  Tensor x = randn({1, 4, 4, 3}, 1), w = randn({2, 5, 5, 3}, 2), gy = randn({1, 2, 2, 2}, 3);
  try {
    (void)wg::im2col_forward(x, w, 1, 1, 0, 0);  // a 5x5 kernel on a 4x4 image without padding
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel inside the padded input"), std::string::npos) << e.what();
  }
  Tensor w3 = randn({2, 3, 3, 3}, 4);
  try {
    (void)wg::im2col_backward_data(gy, w3, x.shape(), 1, 1, 1, 1);  // stride 1 pad 1 gives 4x4, not 2x2
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be (1, 4, 4, 2)"), std::string::npos) << e.what();
  }
}

TEST(Im2colWeightsGrad, Conv2dTakesItForStride2WhereTheRuleChoosesIt) {
  ops::Conv2dParams p{2, 2, 1, 1, 1, 1, 1};
  if (!wg::im2col_chosen(3, 3, 2, 2, 1, 1, 1, 1, 1, 64, 64, DType::f32))
    GTEST_SKIP() << "not chosen on this CPU (it needs AVX-512 BF16)";
  ModeGuard rule(wg::Mode::heuristic);  // the static rule (automatic measures)
  Tensor x = randn({2, 8, 8, 64}, 31), w = randn({64, 3, 3, 64}, 32, DType::f32, 0.1), gy = randn({2, 4, 4, 64}, 33);
  Tensor wr = w.clone();
  wr.set_requires_grad(true);
  ops::conv2d(x, wr, Tensor(), p).backward(gy);
  EXPECT_EQ(wr.grad().to_double_vector(), wg::im2col_backward_weights(gy, x, 2, 1).to_double_vector());
}

TEST(Winograd, BiasIsAddedAndItsGradientIsDySummed) {
  // conv2d under mode winograd with a bias: y = the reference convolution + b; db = dy summed over
  // N, H, W; dx and dw as without bias.
  ModeGuard on(wg::Mode::winograd);
  const Geo g{"bias", 2, 5, 6, 7, 9};
  Tensor x = randn({g.n, g.h, g.w, g.c}, 51), w = randn({g.k, 3, 3, g.c}, 52, DType::f32, 0.5);
  Tensor b = randn({g.k}, 53), gy = randn({g.n, g.h, g.w, g.k}, 54);
  Ref r = reference(g, x.to_double_vector(), w.to_double_vector(), gy.to_double_vector());
  std::vector<double> bv = b.to_double_vector(), db(g.k, 0.0), gv = gy.to_double_vector();
  for (size_t i = 0; i < r.y.size(); ++i) {
    r.y[i] += bv[i % g.k];
    db[i % g.k] += gv[i];
  }
  Tensor xr = x.clone(), wr = w.clone(), br = b.clone();
  for (Tensor* t : {&xr, &wr, &br}) t->set_requires_grad(true);
  Tensor y = ops::conv2d(xr, wr, br, ops::Conv2dParams{1, 1, 1, 1, 1, 1, 1});
  y.backward(gy);
  double tol = 8e-5 * static_cast<double>(9 * std::max(g.c, g.k) + 1);
  expect_close(y, r.y, tol, 1e-5, "y");
  expect_close(xr.grad(), r.gx, tol, 1e-5, "dx");
  expect_close(wr.grad(), r.gw, 8e-5 * static_cast<double>(g.n * g.h * g.w + 1), 1e-5, "dw");
  expect_close(br.grad(), db, 1e-4, 1e-5, "db");
  EXPECT_EQ(y.to_double_vector(), wg::forward(x, w, b).to_double_vector());  // it was Winograd's
}

TEST(Winograd, ApplicableOnlyTo3x3Stride1Pad1) {
  EXPECT_TRUE(wg::applicable(3, 3, 1, 1, 1, 1, 1, 1, 1, false, DType::bf16));
  EXPECT_TRUE(wg::applicable(3, 3, 1, 1, 1, 1, 1, 1, 1, false, DType::f32));
  EXPECT_FALSE(wg::applicable(3, 3, 2, 2, 1, 1, 1, 1, 1, false, DType::bf16));  // stride 2
  EXPECT_FALSE(wg::applicable(3, 3, 1, 1, 0, 0, 1, 1, 1, false, DType::bf16));  // no padding
  EXPECT_TRUE(wg::applicable(3, 3, 1, 1, 1, 1, 1, 1, 1, true, DType::bf16));    // with bias too
  EXPECT_FALSE(wg::applicable(3, 3, 1, 1, 1, 1, 2, 2, 1, false, DType::bf16));  // dilation
  EXPECT_FALSE(wg::applicable(3, 3, 1, 1, 1, 1, 1, 1, 2, false, DType::bf16));  // groups
  EXPECT_FALSE(wg::applicable(1, 1, 1, 1, 0, 0, 1, 1, 1, false, DType::bf16));  // 1x1
  EXPECT_FALSE(wg::applicable(3, 3, 1, 1, 1, 1, 1, 1, 1, false, DType::f16));
  ModeGuard direct(wg::Mode::direct);
  EXPECT_FALSE(wg::chosen(64, 64, DType::bf16));
}
