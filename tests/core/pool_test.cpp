// Pooling: max/avg (padding, ceil_mode, count_include_pad), adaptive and global average pooling,
// forward and backward against naive double-precision loops written from PyTorch's definitions,
// gradchecks, ties and NaN, errors, and fixed cases against PyTorch.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops/pool.h"
#include "tests/core/nn_test_util.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::randn;

namespace {

struct Ref {
  Shape out;
  std::vector<double> y, dx;
};

int64_t ref_out_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  double q = static_cast<double>(in + 2 * p - k) / static_cast<double>(s);
  int64_t o = static_cast<int64_t>(ceil_mode ? std::ceil(q) : std::floor(q)) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;  // the last window must start inside input or left pad
  return o;
}

// Windows as lists of input coordinates per output coordinate, plus the divisor factor per output.
struct Windows {
  std::vector<std::vector<int64_t>> taps;
  std::vector<double> div;
};

Windows pool_windows(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode, bool include_pad) {
  Windows w;
  int64_t out = ref_out_size(in, k, s, p, ceil_mode);
  for (int64_t o = 0; o < out; ++o) {
    std::vector<int64_t> taps;
    double padded = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t i = o * s - p + j;
      if (i < in + p) padded += 1;  // PyTorch counts padding, not the ceil-mode overhang beyond it
      if (i >= 0 && i < in) taps.push_back(i);
    }
    w.div.push_back(include_pad ? padded : static_cast<double>(taps.size()));
    w.taps.push_back(taps);
  }
  return w;
}

Windows adaptive_windows(int64_t in, int64_t out) {
  Windows w;
  for (int64_t o = 0; o < out; ++o) {
    int64_t st = static_cast<int64_t>(std::floor(static_cast<double>(o * in) / out));
    int64_t en = static_cast<int64_t>(std::ceil(static_cast<double>((o + 1) * in) / out));
    std::vector<int64_t> taps;
    for (int64_t i = st; i < en; ++i) taps.push_back(i);
    w.div.push_back(static_cast<double>(taps.size()));
    w.taps.push_back(taps);
  }
  return w;
}

// y and dx (for output gradient dy) of a max or average pool over the windows wh x ww.
Ref reference(const std::vector<double>& x, const Shape& s, const Windows& wh, const Windows& ww, bool is_max,
              const std::vector<double>& dy) {
  int64_t N = s[0], H = s[1], W = s[2], C = s[3], OH = wh.taps.size(), OW = ww.taps.size();
  Ref r;
  r.out = {N, OH, OW, C};
  r.y.assign(N * OH * OW * C, 0.0);
  r.dx.assign(x.size(), 0.0);
  auto xi = [&](int64_t n, int64_t h, int64_t w, int64_t c) { return ((n * H + h) * W + w) * C + c; };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t c = 0; c < C; ++c) {
          int64_t o = ((n * OH + oh) * OW + ow) * C + c;
          if (is_max) {
            double best = -std::numeric_limits<double>::infinity();
            int64_t arg = -1;
            for (int64_t h : wh.taps[oh])
              for (int64_t w : ww.taps[ow])
                if (arg < 0 || x[xi(n, h, w, c)] > best) {
                  best = x[xi(n, h, w, c)];
                  arg = xi(n, h, w, c);
                }
            r.y[o] = best;
            r.dx[arg] += dy[o];
          } else {
            double sum = 0, div = wh.div[oh] * ww.div[ow];
            for (int64_t h : wh.taps[oh])
              for (int64_t w : ww.taps[ow]) {
                sum += x[xi(n, h, w, c)];
                r.dx[xi(n, h, w, c)] += dy[o] / div;
              }
            r.y[o] = sum / div;
          }
        }
  return r;
}

struct PoolCase {
  Shape shape;
  ops::Pool2dParams p;
};

ops::Pool2dParams params(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, bool ceil_mode,
                         bool include_pad = true) {
  ops::Pool2dParams p;
  p.kernel_h = kh;
  p.kernel_w = kw;
  p.stride_h = sh;
  p.stride_w = sw;
  p.pad_h = ph;
  p.pad_w = pw;
  p.ceil_mode = ceil_mode;
  p.count_include_pad = include_pad;
  return p;
}

std::vector<PoolCase> cases() {
  return {
      {{2, 7, 9, 3}, params(3, 3, 2, 2, 1, 1, false)},   // ResNet stem geometry, odd sizes
      {{1, 8, 8, 4}, params(2, 2, 2, 2, 0, 0, false)},   // batch 1, the common 2x2
      {{2, 5, 5, 3}, params(2, 2, 2, 2, 1, 1, true)},    // ceil mode drops a window starting in the pad
      {{1, 6, 5, 2}, params(3, 3, 2, 2, 1, 1, true)},    // ceil-mode overhang past the padding
      {{3, 7, 6, 5}, params(3, 2, 1, 2, 1, 0, false)},   // asymmetric kernel and stride
      {{1, 4, 4, 1}, params(3, 3, 3, 3, 0, 0, true)},    // ceil mode, partial last window
      {{1, 5, 5, 2}, params(2, 2, 3, 3, 0, 0, false)},   // stride > kernel: uncovered inputs
      {{2, 6, 6, 3}, params(3, 3, 1, 1, 1, 1, false)},   // "same" pooling
      {{4, 33, 31, 20}, params(3, 3, 2, 2, 1, 1, true)}, // big enough for the threaded path
  };
}

std::string describe(const PoolCase& c) {
  const auto& p = c.p;
  return shape_str(c.shape) + " k" + std::to_string(p.kernel_h) + "x" + std::to_string(p.kernel_w) + " s" +
         std::to_string(p.stride_h) + "x" + std::to_string(p.stride_w) + " p" + std::to_string(p.pad_h) + "x" +
         std::to_string(p.pad_w) + (p.ceil_mode ? " ceil" : "") + (p.count_include_pad ? "" : " exclude_pad");
}

void check_pool(const PoolCase& c, bool is_max, DType dtype, double tol) {
  SCOPED_TRACE(std::string(is_max ? "max " : "avg ") + describe(c) + " " + dtype_name(dtype));
  const auto& p = c.p;
  Tensor x = randn(c.shape, 40, dtype).set_requires_grad(true);
  Windows wh = pool_windows(c.shape[1], p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode, p.count_include_pad);
  Windows ww = pool_windows(c.shape[2], p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode, p.count_include_pad);
  Shape out{c.shape[0], static_cast<int64_t>(wh.taps.size()), static_cast<int64_t>(ww.taps.size()), c.shape[3]};
  Tensor dy = randn(out, 41, dtype);
  Ref r = reference(x.to_double_vector(), c.shape, wh, ww, is_max, dy.to_double_vector());
  Tensor y = is_max ? ops::max_pool2d(x, p) : ops::avg_pool2d(x, p);
  ASSERT_EQ(y.shape(), r.out);
  EXPECT_EQ(ops::pool2d_output_shape(c.shape, p), r.out);
  expect_close(y, r.y, tol, tol, "y");
  y.backward(dy);
  expect_close(x.grad(), r.dx, tol, tol, "dx");
}

void check_adaptive(const Shape& s, int64_t oh, int64_t ow, DType dtype, double tol) {
  SCOPED_TRACE(shape_str(s) + " -> " + std::to_string(oh) + "x" + std::to_string(ow));
  Tensor x = randn(s, 42, dtype).set_requires_grad(true);
  Tensor dy = randn({s[0], oh, ow, s[3]}, 43, dtype);
  Ref r = reference(x.to_double_vector(), s, adaptive_windows(s[1], oh), adaptive_windows(s[2], ow), false,
                    dy.to_double_vector());
  Tensor y = ops::adaptive_avg_pool2d(x, oh, ow);
  ASSERT_EQ(y.shape(), r.out);
  expect_close(y, r.y, tol, tol, "y");
  y.backward(dy);
  expect_close(x.grad(), r.dx, tol, tol, "dx");
}

}  // namespace

TEST(Pool, MaxMatchesReference) {
  for (const PoolCase& c : cases()) check_pool(c, true, DType::f32, 1e-6);
  check_pool(cases()[0], true, DType::f64, 1e-12);
}

TEST(Pool, AvgMatchesReference) {
  for (bool include_pad : {true, false})
    for (PoolCase c : cases()) {
      c.p.count_include_pad = include_pad;
      check_pool(c, false, DType::f32, 1e-5);
    }
  check_pool(cases()[3], false, DType::f64, 1e-12);
}

TEST(Pool, AdaptiveMatchesReference) {
  check_adaptive({2, 7, 5, 3}, 3, 2, DType::f32, 1e-5);
  check_adaptive({1, 4, 4, 2}, 4, 4, DType::f64, 1e-12);  // identity
  check_adaptive({1, 5, 5, 2}, 7, 7, DType::f64, 1e-12);  // more outputs than inputs: bins overlap
  check_adaptive({2, 10, 10, 3}, 3, 3, DType::f32, 1e-5);
  check_adaptive({3, 14, 14, 40}, 6, 6, DType::f32, 1e-5);
}

TEST(Pool, GlobalAvgMatchesReference) {
  for (Shape s : {Shape{2, 5, 7, 3}, Shape{1, 1, 1, 4}, Shape{3, 14, 14, 40}}) {
    SCOPED_TRACE(shape_str(s));
    Tensor x = randn(s, 44).set_requires_grad(true);
    Tensor dy = randn({s[0], s[3]}, 45);
    Ref r = reference(x.to_double_vector(), s, adaptive_windows(s[1], 1), adaptive_windows(s[2], 1), false,
                      dy.to_double_vector());
    Tensor y = ops::global_avg_pool(x);
    ASSERT_EQ(y.shape(), (Shape{s[0], s[3]}));
    expect_close(y, r.y, 1e-5, 1e-5, "y");
    y.backward(dy);
    expect_close(x.grad(), r.dx, 1e-6, 1e-5, "dx");
  }
}

TEST(Pool, Gradcheck) {
  using kiln::testing::gradcheck;
  for (const PoolCase& c : {cases()[0], cases()[3], cases()[4]}) {
    Tensor x = randn(c.shape, 46, DType::f64).set_requires_grad(true);
    auto p = c.p;
    gradcheck([p](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], p); }, {x}, "max " + describe(c));
    for (bool include_pad : {true, false}) {
      p.count_include_pad = include_pad;
      gradcheck([p](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], p); }, {x}, "avg " + describe(c));
    }
  }
  Tensor x = randn({2, 5, 7, 3}, 47, DType::f64).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::adaptive_avg_pool2d(in[0], 3, 4); }, {x}, "adaptive");
  gradcheck([](const std::vector<Tensor>& in) { return ops::global_avg_pool(in[0]); }, {x}, "global");
  Tensor xf = randn({1, 6, 5, 2}, 48).set_requires_grad(true);
  gradcheck([](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], params(3, 3, 2, 2, 1, 1, true)); },
            {xf}, "avg f32");
}

TEST(Pool, MaxTiesGoToTheFirstAndNaNPropagates) {
  // PyTorch keeps the first maximum of a window (row-major), so an all-equal input sends each
  // window's gradient to its top-left element.
  Tensor x = Tensor::zeros({1, 3, 3, 1}).set_requires_grad(true);
  Tensor y = ops::max_pool2d(x, params(2, 2, 1, 1, 0, 0, false));
  y.backward(Tensor::ones({1, 2, 2, 1}));
  expect_close(x.grad(), {1, 1, 0, 1, 1, 0, 0, 0, 0}, 0, 0, "tie gradient");
  std::vector<double> v(9, 1.0);
  v[4] = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> out = ops::max_pool2d(Tensor::from_vector(v, {1, 3, 3, 1}, DType::f32),
                                            params(2, 2, 1, 1, 0, 0, false)).to_double_vector();
  for (double o : out) EXPECT_TRUE(std::isnan(o));
}

TEST(Pool, NonContiguousInput) {
  // An NCHW tensor viewed as NHWC: the op packs it; gradients reach the NCHW leaf.
  Tensor base = randn({2, 3, 5, 7}, 50, DType::f64).set_requires_grad(true);
  Tensor x = base.permute({0, 2, 3, 1});
  ASSERT_FALSE(x.is_contiguous());
  auto p = params(3, 3, 2, 2, 1, 1, true);
  Tensor packed = x.detach().contiguous().set_requires_grad(true);
  Tensor want = ops::max_pool2d(packed, p);
  Tensor y = ops::max_pool2d(x, p);
  expect_close(y, want.to_double_vector(), 0, 0, "y");
  Tensor dy = randn(y.shape(), 51, DType::f64);
  y.backward(dy);
  want.backward(dy);
  expect_close(base.grad().permute({0, 2, 3, 1}), packed.grad().to_double_vector(), 0, 0, "dx");
}

TEST(Pool, LowPrecisionComputesInF32) {
  Tensor x = randn({2, 7, 9, 3}, 49).to(DType::bf16).set_requires_grad(true);
  auto p = params(3, 3, 2, 2, 1, 1, false);
  Tensor want = ops::max_pool2d(x.detach().to(DType::f32), p);
  Tensor y = ops::max_pool2d(x, p);
  EXPECT_EQ(y.dtype(), DType::bf16);
  expect_close(y, want.to_double_vector(), 0, 0, "bf16 max is exact");
  y.backward(Tensor::ones(y.shape(), DType::bf16));
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
  Tensor a = ops::avg_pool2d(x.detach(), p);
  expect_close(a, ops::avg_pool2d(x.detach().to(DType::f32), p).to_double_vector(), 1e-2, 1e-2, "bf16 avg");
}

TEST(Pool, ErrorsNameOpAndShapes) {
  using kiln::testing::expect_error;
  Tensor x = Tensor::zeros({2, 4, 4, 3});
  expect_error([&] { ops::max_pool2d(Tensor::zeros({4, 4, 3}), params(2, 2, 2, 2, 0, 0, false)); },
               {"max_pool2d", "4-D", "f32[4, 4, 3]"});
  expect_error([&] { ops::avg_pool2d(x, params(2, 2, 2, 2, 2, 0, false)); },
               {"avg_pool2d", "padding 2x0", "half the kernel 2x2", "f32[2, 4, 4, 3]"});
  expect_error([&] { ops::max_pool2d(x, params(5, 5, 1, 1, 0, 0, false)); },
               {"max_pool2d", "kernel 5x5", "does not fit", "f32[2, 4, 4, 3]"});
  expect_error([&] { ops::max_pool2d(x, params(2, 2, 0, 1, 0, 0, false)); }, {"max_pool2d", "stride 0x1"});
  expect_error([&] { ops::adaptive_avg_pool2d(x, 0, 2); }, {"adaptive_avg_pool2d", "0x2", "f32[2, 4, 4, 3]"});
  expect_error([&] { ops::global_avg_pool(Tensor::zeros({2, 4}, DType::i64)); }, {"global_avg_pool", "i64[2, 4]"});
}

// Fixed cases generated once with torch 1.13 (/usr/bin/python3); x and dy in NHWC flat order:
//   f = lambda n, a=0.7, b=0.3, s=1.5: torch.tensor([math.sin(a*i+b)*s for i in range(n)], dtype=torch.float64)
//   x = f(60).reshape(1,6,5,2).permute(0,3,1,2).requires_grad_(); y = <pool>(x)
//   dy = f(y.numel(), 0.3, 1.1, 1.0).reshape(NHWC of y).permute(0,3,1,2); (y*dy).sum().backward()
//   <pool>: F.max_pool2d(x, 3, 2, 1, ceil_mode=True); F.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
//   count_include_pad=True / False); F.adaptive_avg_pool2d(x, (4, 3)); F.adaptive_avg_pool2d(x, 1)
namespace {
struct TorchCase {
  std::vector<double> y;
  std::vector<std::pair<int, double>> dx;  // (flat NHWC index, value)
};
void check_torch(const std::function<Tensor(const Tensor&)>& pool, const TorchCase& want, const std::string& what) {
  SCOPED_TRACE(what);
  Tensor x = kiln::testing::wave_tensor({1, 6, 5, 2}, DType::f64).set_requires_grad(true);
  Tensor y = pool(x);
  expect_close(y, want.y, 1e-9, 0, "y");
  y.backward(kiln::testing::wave_tensor(y.shape(), DType::f64, 0.3, 1.1, 1.0));
  std::vector<double> dx = x.grad().to_double_vector();
  for (auto [i, v] : want.dx) EXPECT_NEAR(dx[i], v, 1e-9) << "dx[" << i << "]";
}
}  // namespace

TEST(Pool, MatchesPyTorch) {
  check_torch([](const Tensor& x) { return ops::max_pool2d(x, params(3, 3, 2, 2, 1, 1, true)); },
              {{1.4874972157, 1.4840373699, 1.4874972157, 1.0131947708, 0.4912116587, 1.2887427223, 1.4801579464,
                1.4840373699, 0.9944538451, 1.3138216197, 1.4711448716, 1.4758600419, 0.9561338942, -0.0132769639,
                1.4604681835, 1.4660137686, 1.4711448716, 1.4660137686, -1.0141767531, -0.4420074023, 1.4604681835,
                1.3374148096, 1.4604681835, 0.8966405504},
               {{2, 1.8828721705}, {3, 0.9092974268}, {0, 0.0}, {12, -0.3507832277}, {38, -1.1921537759},
                {55, 0.8987080958}, {57, 0.9893582466}, {59, 0.0}}},
              "max k3 s2 p1 ceil");
  check_torch([](const Tensor& x) { return ops::avg_pool2d(x, params(3, 3, 2, 2, 1, 1, true, true)); },
              {{0.4667651446, 0.4218446396, -0.130306373, -0.3557065755, -0.3165640863, -0.0118301266, 0.4157668815,
                0.0050913271, -0.5511244979, -0.485675604, 0.2195012247, 0.5547353952, -0.4242997846, -0.6326367087,
                -0.1740056646, 0.2098504607, 0.6248719774, 0.3907470717, -0.3792771538, -0.3216126137, 0.1307227278,
                0.2986746596, 0.2285961732, -0.0226625657},
               {{0, 0.09902304}, {9, 0.0572779302}, {30, -0.0845193254}, {59, 0.1556608852}}},
              "avg k3 s2 p1 ceil include_pad");
  check_torch([](const Tensor& x) { return ops::avg_pool2d(x, params(3, 3, 2, 2, 1, 1, true, false)); },
              {{1.0502215754, 0.949150439, -0.1954595596, -0.5335598632, -0.7122691943, -0.0266177848, 0.6236503223,
                0.0076369906, -0.5511244979, -0.485675604, 0.3292518371, 0.8321030928, -0.6364496769, -0.9489550631,
                -0.1740056646, 0.2098504607, 0.9373079661, 0.5861206075, -1.1378314614, -0.9648378412, 0.2614454556,
                0.5973493192, 0.6857885197, -0.067987697},
               {{0, 0.22280184}, {9, 0.128875343}, {30, -0.1267789881}, {59, 0.4808308895}}},
              "avg k3 s2 p1 ceil exclude_pad");
  check_torch([](const Tensor& x) { return ops::adaptive_avg_pool2d(x, 4, 3); },
              {{1.0502215754, 0.949150439, -0.1954595596, -0.5335598632, -0.7122691943, -0.0266177848, 0.9405528745,
                0.3848680612, -0.5390340083, -0.619096005, -0.008555345, 0.6855578085, -0.3857587847, -0.9410136741,
                -0.3917312248, 0.0161010314, 1.0630676893, 0.9131747598, -0.9495971243, -1.0500200194, 0.0266442416,
                0.4241930922, 0.9035288486, 0.3165840806},
               {{0, 0.22280184}, {11, 0.2317688966}, {30, -0.2499808144}, {59, 0.2473395617}}},
              "adaptive 4x3");
  check_torch([](const Tensor& x) { return ops::global_avg_pool(x); },
              {{0.0638907546, 0.0413915373}, {{0, 0.029706912}, {1, 0.0328483243}, {58, 0.029706912}}}, "global");
}
