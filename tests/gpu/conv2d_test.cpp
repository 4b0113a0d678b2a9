// cuDNN convolution (forward, backward-data, backward-weight) against a direct double-precision
// convolution written here: odd sizes, stride 2, padding, dilation, groups, depthwise, 1x1,
// asymmetric kernels, batch 1; f32 (FMA and TF32), f16, bf16; heuristics and benchmark mode.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

struct Case {
  int64_t N, H, W, Cin, Cout, KH, KW;
  ops::Conv2dParams p;
};

struct ConvRef {
  Shape y_shape;
  std::vector<double> y, dx, dw;
};

// Direct convolution and its two gradients for upstream gradient gy (same loops, scattered).
ConvRef ref_conv(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy_or_none) {
  const auto& p = c.p;
  int64_t OH = (c.H + 2 * p.pad_h - p.dilation_h * (c.KH - 1) - 1) / p.stride_h + 1;
  int64_t OW = (c.W + 2 * p.pad_w - p.dilation_w * (c.KW - 1) - 1) / p.stride_w + 1;
  int64_t cin_g = c.Cin / p.groups, cout_g = c.Cout / p.groups;
  ConvRef r;
  r.y_shape = {c.N, OH, OW, c.Cout};
  std::vector<double> xv = x.to_double_vector(), wv = w.to_double_vector();
  std::vector<double> bv = b.defined() ? b.to_double_vector() : std::vector<double>(c.Cout, 0.0);
  std::vector<double> gv = gy_or_none.defined() ? gy_or_none.to_double_vector() : std::vector<double>();
  r.y.assign(static_cast<size_t>(c.N * OH * OW * c.Cout), 0.0);
  r.dx.assign(xv.size(), 0.0);
  r.dw.assign(wv.size(), 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t co = 0; co < c.Cout; ++co) {
          int64_t yi = ((n * OH + oh) * OW + ow) * c.Cout + co;
          int64_t g = co / cout_g;
          double s = bv[co];
          double gyv = gv.empty() ? 0.0 : gv[yi];
          for (int64_t kh = 0; kh < c.KH; ++kh)
            for (int64_t kw = 0; kw < c.KW; ++kw) {
              int64_t h = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
              int64_t ww = ow * p.stride_w - p.pad_w + kw * p.dilation_w;
              if (h < 0 || h >= c.H || ww < 0 || ww >= c.W) continue;
              for (int64_t ci = 0; ci < cin_g; ++ci) {
                int64_t xi = ((n * c.H + h) * c.W + ww) * c.Cin + g * cin_g + ci;
                int64_t wi = ((co * c.KH + kh) * c.KW + kw) * cin_g + ci;
                s += xv[xi] * wv[wi];
                r.dx[xi] += gyv * wv[wi];
                r.dw[wi] += gyv * xv[xi];
              }
            }
          r.y[yi] = s;
        }
  return r;
}

ops::Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1, int64_t g = 1) {
  ops::Conv2dParams p;
  p.stride_h = sh;
  p.stride_w = sw;
  p.pad_h = ph;
  p.pad_w = pw;
  p.dilation_h = dh;
  p.dilation_w = dw;
  p.groups = g;
  return p;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {2, 7, 9, 3, 5, 3, 3, params(1, 1, 1, 1)},          {1, 8, 8, 4, 6, 3, 3, params(2, 2, 0, 0)},
      {2, 9, 7, 4, 4, 3, 3, params(1, 1, 2, 2, 2, 2, 2)}, {3, 5, 5, 8, 16, 1, 1, params(1, 1, 0, 0)},
      {2, 11, 10, 3, 8, 5, 3, params(2, 1, 2, 1)},        {2, 6, 6, 6, 6, 3, 3, params(1, 1, 1, 1, 1, 1, 6)},
      {1, 15, 13, 16, 32, 3, 3, params(2, 2, 1, 1)}};
  return c;
}

std::string describe(const Case& c, DType t, bool tf32) {
  return "N" + std::to_string(c.N) + " " + std::to_string(c.H) + "x" + std::to_string(c.W) + " Cin" +
         std::to_string(c.Cin) + " Cout" + std::to_string(c.Cout) + " k" + std::to_string(c.KH) + "x" +
         std::to_string(c.KW) + " s" + std::to_string(c.p.stride_h) + " p" + std::to_string(c.p.pad_h) + " d" +
         std::to_string(c.p.dilation_h) + " g" + std::to_string(c.p.groups) + " " + dtype_name(t) +
         (tf32 ? " tf32" : "");
}

void check_case(const Case& c, DType t, bool tf32, uint64_t seed) {
  cuda::set_conv_allow_tf32(tf32);
  Tensor x = rand_cpu({c.N, c.H, c.W, c.Cin}, seed, t);
  Tensor w = rand_cpu({c.Cout, c.KH, c.KW, c.Cin / c.p.groups}, seed + 1, t);
  Tensor b = rand_cpu({c.Cout}, seed + 2, DType::f32);
  ConvRef shape_only = ref_conv(c, x, w, b, Tensor());
  Tensor gy = rand_cpu(shape_only.y_shape, seed + 3, t);
  ConvRef r = ref_conv(c, x, w, b, gy);
  double per = t == DType::f32 ? (tf32 ? 3e-3 : 1e-5) : 2 * gputest::rounding(t);
  double terms_y = static_cast<double>(c.KH * c.KW * c.Cin / c.p.groups);
  double terms_w = static_cast<double>(shape_only.y.size() / c.Cout);
  std::string what = describe(c, t, tf32);
  Tensor y = cuda::conv2d_forward(x.to(gpu()), w.to(gpu()), b.to(DType::f32).to(gpu()), c.p);
  ASSERT_EQ(y.shape(), r.y_shape) << what;
  gputest::expect_near_all(y, r.y, per * std::sqrt(terms_y), per, "forward " + what);
  Tensor dx = cuda::conv2d_backward_data(gy.to(gpu()), w.to(gpu()), x.shape(), c.p);
  gputest::expect_near_all(dx, r.dx, per * std::sqrt(terms_y * c.Cout), per, "backward-data " + what);
  Tensor dw = cuda::conv2d_backward_weight(gy.to(gpu()), x.to(gpu()), w.shape(), c.p);
  gputest::expect_near_all(dw, r.dw, per * std::sqrt(terms_w), per, "backward-weight " + what);
}

}  // namespace

TEST(CudaConv2d, F32WithoutTf32) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (const Case& c : cases()) check_case(c, DType::f32, false, 11);
  cuda::set_conv_allow_tf32(true);
}

TEST(CudaConv2d, F32WithTf32) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (const Case& c : cases()) check_case(c, DType::f32, true, 21);
}

TEST(CudaConv2d, HalfAndBfloat16) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (DType t : {DType::bf16, DType::f16})
    for (const Case& c : cases()) check_case(c, t, true, 31);
}

TEST(CudaConv2d, BenchmarkModeAndCachedPlans) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  cuda::set_cudnn_benchmark(true);
  for (const Case& c : cases()) check_case(c, DType::bf16, true, 41);
  check_case(cases()[0], DType::f32, false, 42);
  cuda::set_cudnn_benchmark(false);
  // Second runs use the cached plans and must give the same numbers.
  check_case(cases()[1], DType::bf16, true, 41);
  cuda::set_conv_allow_tf32(true);
}

TEST(CudaConv2d, SmallWorkspaceLimitStillRuns) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  size_t old = cuda::conv_workspace_limit();
  cuda::set_conv_workspace_limit(0);  // only algorithms without workspace (or the smallest) qualify
  Case c{2, 10, 10, 8, 8, 3, 3, params(1, 1, 1, 1)};
  check_case(c, DType::f32, true, 51);
  cuda::set_conv_workspace_limit(old);
}

TEST(CudaConv2d, BadShapesThrow) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor x = Tensor::zeros({1, 5, 5, 4}, DType::f32, gpu());
  EXPECT_THROW(cuda::conv2d_forward(x, Tensor::zeros({8, 3, 3, 3}, DType::f32, gpu()), Tensor(), params(1, 1, 0, 0)),
               Error);  // Cin mismatch
  EXPECT_THROW(cuda::conv2d_forward(x, Tensor::zeros({8, 7, 7, 4}, DType::f32, gpu()), Tensor(), params(1, 1, 0, 0)),
               Error);  // empty output
  EXPECT_THROW(cuda::conv2d_forward(x, Tensor::zeros({8, 3, 3, 4}, DType::bf16, gpu()), Tensor(), params(1, 1, 0, 0)),
               Error);  // dtype mismatch
  EXPECT_THROW(cuda::conv2d_forward(x, Tensor::zeros({6, 3, 3, 2}, DType::f32, gpu()), Tensor(),
                                    params(1, 1, 0, 0, 1, 1, 4)),
               Error);  // Cout 6 not divisible by 4 groups
  try {
    cuda::conv2d_forward(x, Tensor::zeros({8, 3, 3, 3}, DType::f32, gpu()), Tensor(), params(1, 1, 0, 0));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 5, 5, 4]"), std::string::npos) << e.what();
  }
}

// Past cuDNN's 2^31 elements per tensor the error is a TooLargeError (AutoBatch: "does not fit")
// saying by how much: checked before anything is allocated, so a broadcast view of 2^31 elements
// (stride 0 along the batch, 4 bytes of storage per image) is enough.
TEST(CudaConv2d, OverTheElementLimitIsTooLarge) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor img = Tensor::zeros({1, 64, 64, 16}, DType::f16, gpu());
  int64_t n = (int64_t(1) << 31) / (64 * 64 * 16) + 1;  // one image past 2^31 elements
  Tensor x = make_view(img, {n, 64, 64, 16}, {0, 64 * 16, 16, 1}, 0);
  Tensor w = Tensor::zeros({16, 1, 1, 16}, DType::f16, gpu());
  try {
    cuda::conv2d_forward(x, w, Tensor(), params(1, 1, 0, 0));
    ADD_FAILURE() << "expected TooLargeError";
  } catch (const TooLargeError& e) {
    EXPECT_GT(e.excess(), 1.0);
    EXPECT_LT(e.excess(), 1.001);
    EXPECT_NE(std::string(e.what()).find("2^31"), std::string::npos) << e.what();
  }
}

#endif  // KILN_WITH_CUDA
