// GPU pooling against PyTorch's definitions written out in double: max and avg pooling (padding,
// stride 2, overlapping 3x3/2 windows, ceil_mode, count_include_pad both ways), global and adaptive
// average pooling; forward and backward.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

int64_t ref_out(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  double v = static_cast<double>(in + 2 * p - k) / static_cast<double>(s);
  int64_t o = static_cast<int64_t>(ceil_mode ? std::ceil(v) : std::floor(v)) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

struct PoolRef {
  Shape y_shape;
  std::vector<double> y, dx;
};

PoolRef ref_pool(const Tensor& x, const Tensor& gy_or_none, const ops::Pool2dParams& p, bool is_max) {
  int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  int64_t OH = ref_out(H, p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode);
  int64_t OW = ref_out(W, p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode);
  PoolRef r;
  r.y_shape = {N, OH, OW, C};
  std::vector<double> xv = x.to_double_vector();
  std::vector<double> gv = gy_or_none.defined() ? gy_or_none.to_double_vector() : std::vector<double>();
  r.y.assign(static_cast<size_t>(N * OH * OW * C), 0.0);
  r.dx.assign(xv.size(), 0.0);
  auto X = [&](int64_t n, int64_t h, int64_t w, int64_t c) { return ((n * H + h) * W + w) * C + c; };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t c = 0; c < C; ++c) {
          int64_t yi = ((n * OH + oh) * OW + ow) * C + c;
          double g = gv.empty() ? 0.0 : gv[yi];
          int64_t hs = oh * p.stride_h - p.pad_h, ws = ow * p.stride_w - p.pad_w;
          int64_t he = std::min(hs + p.kernel_h, H + p.pad_h), we = std::min(ws + p.kernel_w, W + p.pad_w);
          int64_t pool = (he - hs) * (we - ws);
          int64_t h0 = std::max<int64_t>(hs, 0), w0 = std::max<int64_t>(ws, 0);
          int64_t h1 = std::min(he, H), w1 = std::min(we, W);
          if (is_max) {
            double best = -INFINITY;
            int64_t arg = -1;
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w)
                if (xv[X(n, h, w, c)] > best) {
                  best = xv[X(n, h, w, c)];
                  arg = X(n, h, w, c);
                }
            r.y[yi] = best;
            r.dx[arg] += g;
          } else {
            double div = static_cast<double>(p.count_include_pad ? pool : (h1 - h0) * (w1 - w0)), s = 0;
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) {
                s += xv[X(n, h, w, c)];
                r.dx[X(n, h, w, c)] += g / div;
              }
            r.y[yi] = s / div;
          }
        }
  return r;
}

ops::Pool2dParams pp(int64_t k, int64_t s, int64_t p, bool ceil_mode, bool include_pad = true) {
  ops::Pool2dParams r;
  r.kernel_h = r.kernel_w = k;
  r.stride_h = r.stride_w = s;
  r.pad_h = r.pad_w = p;
  r.ceil_mode = ceil_mode;
  r.count_include_pad = include_pad;
  return r;
}

}  // namespace

TEST(CudaPool, MaxAndAvgForwardBackward) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  std::vector<ops::Pool2dParams> ps = {pp(2, 2, 0, false), pp(3, 2, 1, false), pp(3, 2, 0, true),
                                       pp(3, 2, 1, true, false), pp(3, 1, 1, false), pp(2, 2, 1, true, true)};
  ops::Pool2dParams asym = pp(3, 2, 1, false);
  asym.kernel_w = 2;
  asym.stride_w = 1;
  asym.pad_w = 0;
  ps.push_back(asym);
  for (DType t : {DType::f32, DType::bf16})
    for (const Shape& s : {Shape{2, 7, 9, 3}, Shape{1, 8, 8, 16}, Shape{3, 13, 11, 5}})
      for (const auto& p : ps)
        for (bool is_max : {true, false}) {
          Tensor x = rand_cpu(s, 3, t);  // continuous values: no ties for the argmax
          PoolRef shape_only = ref_pool(x, Tensor(), p, is_max);
          Tensor gy = rand_cpu(shape_only.y_shape, 4, t);
          PoolRef r = ref_pool(x, gy, p, is_max);
          std::string what = std::string(is_max ? "max" : "avg") + " " + dtype_name(t) + " " + shape_str(s) + " k" +
                             std::to_string(p.kernel_h) + "x" + std::to_string(p.kernel_w) + " s" +
                             std::to_string(p.stride_h) + " p" + std::to_string(p.pad_h) +
                             (p.ceil_mode ? " ceil" : "") + (p.count_include_pad ? "" : " exclude-pad");
          ASSERT_EQ(cuda::pool2d_output_shape(s, p), r.y_shape) << what;
          double tol = 2 * gputest::rounding(t) + 1e-6;
          if (is_max) {
            Tensor idx;
            Tensor y = cuda::max_pool2d_forward(x.to(gpu()), p, &idx);
            gputest::expect_near_all(y, r.y, 0, 0, "forward " + what);
            EXPECT_EQ(idx.dtype(), DType::i32);
            gputest::expect_near_all(cuda::max_pool2d_backward(gy.to(gpu()), idx, s, p), r.dx, tol, tol,
                                     "backward " + what);
          } else {
            gputest::expect_near_all(cuda::avg_pool2d_forward(x.to(gpu()), p), r.y, tol, tol, "forward " + what);
            gputest::expect_near_all(cuda::avg_pool2d_backward(gy.to(gpu()), s, p), r.dx, tol, tol, "backward " + what);
          }
        }
}

TEST(CudaPool, GlobalAndAdaptiveAverage) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor x = rand_cpu({3, 7, 5, 6}, 5);
  std::vector<double> xv = x.to_double_vector(), want(3 * 6, 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) want[(i / (7 * 5 * 6)) * 6 + i % 6] += xv[i] / 35.0;
  gputest::expect_near_all(cuda::global_avg_pool_forward(x.to(gpu())), want, 1e-6, 1e-5, "global forward");
  Tensor gy = rand_cpu({3, 6}, 6);
  std::vector<double> gv = gy.to_double_vector(), wdx(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) wdx[i] = gv[(i / (7 * 5 * 6)) * 6 + i % 6] / 35.0;
  gputest::expect_near_all(cuda::global_avg_pool_backward(gy.to(gpu()), x.shape()), wdx, 1e-7, 1e-6, "global backward");

  struct Ad {
    int64_t oh, ow;
  };
  for (Ad a : {Ad{3, 2}, Ad{7, 5}, Ad{1, 1}, Ad{4, 4}}) {
    int64_t H = 7, W = 5, C = 6;
    std::vector<double> y(static_cast<size_t>(3 * a.oh * a.ow * C), 0.0), dx(xv.size(), 0.0);
    Tensor g2 = rand_cpu({3, a.oh, a.ow, C}, 7);
    std::vector<double> g2v = g2.to_double_vector();
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < a.oh; ++i)
        for (int64_t j = 0; j < a.ow; ++j)
          for (int64_t c = 0; c < C; ++c) {
            int64_t hs = i * H / a.oh, he = ((i + 1) * H + a.oh - 1) / a.oh;
            int64_t ws = j * W / a.ow, we = ((j + 1) * W + a.ow - 1) / a.ow;
            double cnt = static_cast<double>((he - hs) * (we - ws));
            int64_t yi = ((n * a.oh + i) * a.ow + j) * C + c;
            for (int64_t h = hs; h < he; ++h)
              for (int64_t w = ws; w < we; ++w) {
                y[yi] += xv[((n * H + h) * W + w) * C + c] / cnt;
                dx[((n * H + h) * W + w) * C + c] += g2v[yi] / cnt;
              }
          }
    std::string what = "adaptive " + std::to_string(a.oh) + "x" + std::to_string(a.ow);
    gputest::expect_near_all(cuda::adaptive_avg_pool2d_forward(x.to(gpu()), a.oh, a.ow), y, 1e-6, 1e-5, what);
    gputest::expect_near_all(cuda::adaptive_avg_pool2d_backward(g2.to(gpu()), x.shape()), dx, 1e-6, 1e-5,
                             what + " backward");
  }
}

TEST(CudaPool, BadArguments) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor x = Tensor::zeros({1, 4, 4, 2}, DType::f32, gpu());
  EXPECT_THROW(cuda::max_pool2d_forward(x, pp(3, 1, 2, false), nullptr), Error);  // pad > kernel/2
  EXPECT_THROW(cuda::avg_pool2d_forward(x, pp(5, 1, 0, false)), Error);          // window larger than the input
  EXPECT_THROW(cuda::max_pool2d_forward(Tensor::zeros({4, 4, 2}, DType::f32, gpu()), pp(2, 2, 0, false), nullptr),
               Error);
}

#endif  // KILN_WITH_CUDA
