// The cuDNN runtime fusion (core/cuda/conv_fusion_cuda.cu, through ops::conv_scale_bias_relu_stats)
// against today's unfused ops on the same GPU (scale and bias elementwise, ReLU, the existing conv2d,
// the per-channel sums: ops::conv_scale_bias_relu_stats_unfused) on ResNet-50's conv shapes in f16
// and bf16; a shape cuDNN refuses falls back and still matches; the KILN_CUDNN_FUSION switch; the
// timed choice is made once per shape and kept. Tolerances (stated per check below) are in units of
// one rounding of the dtype (gputest::rounding: bf16 8e-3, f16 1e-3): the fused graph keeps the
// scaled, biased, ReLU'd activations in f32 where the unfused ops round them to the dtype twice.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include <cmath>
#include <cstdlib>
#include <optional>

#include "core/autograd.h"
#include "core/ops/conv_fusion.h"
#include "core/ops/reduce.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

struct ConvCase {
  int64_t n, hw, cin, cout, k, stride;
  std::string str() const {
    return std::to_string(n) + "x" + std::to_string(hw) + "x" + std::to_string(hw) + "x" + std::to_string(cin) + " -> " +
           std::to_string(cout) + ", " + std::to_string(k) + "x" + std::to_string(k) + " stride " + std::to_string(stride);
  }
};

struct Inputs {
  Tensor x, scale, bias, w;
  ops::Conv2dParams p;
};

// x ~ N(0, 1), scale ~ N(1, 0.25), bias ~ N(0, 0.5), w ~ N(0, 1/fan_in): y is of order 1.
Inputs make(const ConvCase& c, DType t, uint64_t seed) {
  Inputs in;
  in.x = rand_cpu({c.n, c.hw, c.hw, c.cin}, seed, t).to(gpu());
  in.scale = rand_cpu({c.cin}, seed + 1, t, 0.25, 1.0).to(gpu());
  in.bias = rand_cpu({c.cin}, seed + 2, t, 0.5).to(gpu());
  in.w = rand_cpu({c.cout, c.k, c.k, c.cin}, seed + 3, t, 1.0 / std::sqrt(double(c.cin * c.k * c.k))).to(gpu());
  in.p.stride_h = in.p.stride_w = c.stride;
  in.p.pad_h = in.p.pad_w = c.k / 2;
  return in;
}

// y within 6 roundings (absolute and relative, y of order 1); per channel, the sum within
// 8 roundings of rms(y) * sqrt(count) (independent rounding differences add up like a random walk)
// and the sum of squares within 4 roundings relative (each square moves by at most 2 roundings).
void expect_matches(const ops::ConvBnStats& got, const ops::ConvBnStats& want, DType t, const std::string& what) {
  const double r = gputest::rounding(t);
  ASSERT_EQ(got.y.shape(), want.y.shape()) << what;
  EXPECT_EQ(got.y.dtype(), t) << what;
  EXPECT_EQ(got.sum.dtype(), DType::f32) << what;
  EXPECT_EQ(got.sumsq.dtype(), DType::f32) << what;
  gputest::expect_near_all(got.y, want.y.to_double_vector(), 6 * r, 6 * r, "y " + what);
  const int64_t count = want.y.numel() / want.y.shape()[3];
  const std::vector<double> s = got.sum.to_double_vector(), q = got.sumsq.to_double_vector();
  const std::vector<double> ws = want.sum.to_double_vector(), wq = want.sumsq.to_double_vector();
  int bad = 0;
  for (size_t c = 0; c < ws.size(); ++c) {
    const double rms = std::sqrt(wq[c] / double(count));
    const bool ok = std::fabs(s[c] - ws[c]) <= 8 * r * rms * std::sqrt(double(count)) + 1e-3 &&
                    std::fabs(q[c] - wq[c]) <= 4 * r * wq[c] + 1e-3;
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << what << ": channel " << c << ": sum " << s[c] << " vs " << ws[c] << ", sum of squares " << q[c]
                    << " vs " << wq[c];
  }
  EXPECT_EQ(bad, 0) << what;
}

// ResNet-50's convolutions after a batch norm + ReLU (torchvision's v1.5: the stride in the 3x3),
// batch 4 (8 where the maps are small).
const std::vector<ConvCase> kResNet50 = {
    {4, 56, 64, 64, 1, 1},   {4, 56, 64, 64, 3, 1},   {4, 56, 64, 256, 1, 1}, {4, 56, 256, 64, 1, 1},
    {4, 56, 128, 128, 3, 2}, {4, 28, 128, 128, 3, 1}, {4, 28, 128, 512, 1, 1}, {4, 56, 256, 512, 1, 2},
    {8, 14, 256, 256, 3, 1}, {8, 7, 512, 512, 3, 1},  {8, 7, 512, 2048, 1, 1}};

}  // namespace

TEST(CudaConvFusion, FusedMatchesTheUnfusedOpsOnResNet50Shapes) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::Watchdog dog(300, "CudaConvFusion.FusedMatchesTheUnfusedOpsOnResNet50Shapes");
  EXPECT_NE(conv_bn_stats_forward_kernel.find(gpu()), nullptr);  // registered by cuda::register_kernels
  gputest::FusionEnv env("force");
  for (DType t : {DType::f16, DType::bf16})
    for (const ConvCase& c : kResNet50) {
      const std::string what = std::string(dtype_name(t)) + " " + c.str();
      Inputs in = make(c, t, 11);
      ops::ConvFusionChoice how;
      ops::ConvBnStats got = ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p, &how);
      ops::ConvBnStats want = ops::conv_scale_bias_relu_stats_unfused(in.x, in.scale, in.bias, in.w, in.p);
      // cuDNN 9 fuses this pattern on Ampere and Hopper for channels that are multiples of 8.
      EXPECT_TRUE(how.fused) << what << ": " << how.why;
      expect_matches(got, want, t, what);
      // the second call reuses the cached graph and gives the same values
      ops::ConvFusionChoice again;
      ops::ConvBnStats got2 = ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p, &again);
      EXPECT_EQ(again.fused, how.fused) << what;
      gputest::expect_near_all(got2.y, got.y.to_double_vector(), 0, 0, "y again " + what);
    }
}

TEST(CudaConvFusion, AShapeCudnnRefusesFallsBackAndMatches) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::FusionEnv env("force");
  // Odd channel counts (cuDNN's fused engines want multiples of 8): fused or not, the values match.
  for (const ConvCase& c : {ConvCase{2, 16, 3, 8, 3, 1}, ConvCase{2, 15, 5, 7, 3, 2}, ConvCase{3, 9, 7, 13, 1, 1}})
    for (DType t : {DType::f16, DType::bf16}) {
      const std::string what = std::string(dtype_name(t)) + " " + c.str();
      Inputs in = make(c, t, 21);
      ops::ConvFusionChoice how;
      ops::ConvBnStats got = ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p, &how);
      ops::ConvBnStats want = ops::conv_scale_bias_relu_stats_unfused(in.x, in.scale, in.bias, in.w, in.p);
      std::printf("  %s: %s (%s)\n", what.c_str(), how.fused ? "fused" : "unfused", how.why.c_str());
      if (!how.fused) EXPECT_EQ(how.why.rfind("refused: ", 0), 0u) << what << ": " << how.why;
      expect_matches(got, want, t, what);
    }
}

TEST(CudaConvFusion, F32IsFusedOrFallsBackAndMatches) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::FusionEnv env("force");
  const ConvCase c{2, 14, 64, 64, 3, 1};
  Inputs in = make(c, DType::f32, 31);
  ops::ConvFusionChoice how;
  ops::ConvBnStats got = ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p, &how);
  ops::ConvBnStats want = ops::conv_scale_bias_relu_stats_unfused(in.x, in.scale, in.bias, in.w, in.p);
  std::printf("  f32 %s: %s (%s)\n", c.str().c_str(), how.fused ? "fused" : "unfused", how.why.c_str());
  // f32 may run on TF32 tensor cores on either side (10-bit mantissa): bf16's tolerance, not f32's.
  const double r = gputest::rounding(DType::f16) * 2;
  gputest::expect_near_all(got.y, want.y.to_double_vector(), 6 * r, 6 * r, "f32 y");
  gputest::expect_near_all(got.sumsq, want.sumsq.to_double_vector(), 1e-2, 4 * r, "f32 sumsq");
}

TEST(CudaConvFusion, SwitchOffRunsTheUnfusedOps) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::FusionEnv env("0");
  Inputs in = make({4, 28, 128, 128, 3, 1}, DType::bf16, 41);
  ops::ConvFusionChoice how;
  ops::ConvBnStats got = ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p, &how);
  EXPECT_FALSE(how.fused);
  EXPECT_EQ(how.why, "KILN_CUDNN_FUSION=0");
  ops::ConvBnStats want = ops::conv_scale_bias_relu_stats_unfused(in.x, in.scale, in.bias, in.w, in.p);
  gputest::expect_near_all(got.y, want.y.to_double_vector(), 0, 0, "y");  // the same ops: the same values
}

TEST(CudaConvFusion, TheTimedChoiceIsMadeOnceAndKept) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::FusionEnv env(nullptr);  // the default: timed
  const ConvCase c{6, 28, 128, 128, 3, 1};  // a batch no other test uses: a new cache entry
  Inputs in = make(c, DType::f16, 51);
  ops::ConvFusionChoice first, second;
  ops::ConvBnStats a = ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p, &first);
  ops::ConvBnStats b = ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p, &second);
  std::printf("  f16 %s: fused %.3f ms, unfused %.3f ms -> %s\n", c.str().c_str(), first.fused_ms, first.unfused_ms,
              first.fused ? "fused" : "unfused");
  ASSERT_EQ(first.why, "timed") << first.why;
  EXPECT_GT(first.fused_ms, 0);
  EXPECT_GT(first.unfused_ms, 0);
  EXPECT_EQ(first.fused, first.fused_ms < first.unfused_ms);
  EXPECT_EQ(second.fused, first.fused);  // kept, not timed again
  EXPECT_EQ(second.fused_ms, first.fused_ms);
  EXPECT_EQ(second.unfused_ms, first.unfused_ms);
  ops::ConvBnStats want = ops::conv_scale_bias_relu_stats_unfused(in.x, in.scale, in.bias, in.w, in.p);
  expect_matches(a, want, DType::f16, "first " + c.str());
  expect_matches(b, want, DType::f16, "second " + c.str());
}

TEST(CudaConvFusion, ABadSwitchValueIsAnErrorNamingTheAcceptedOnes) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::FusionEnv env("yes");
  Inputs in = make({1, 8, 8, 8, 1, 1}, DType::f16, 61);
  try {
    ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p);
    ADD_FAILURE() << "KILN_CUDNN_FUSION=yes was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("KILN_CUDNN_FUSION=yes"), std::string::npos) << m;
    EXPECT_NE(m.find("force"), std::string::npos) << m;
  }
}

TEST(CudaConvFusion, RecordingAutogradRunsTheUnfusedOps) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::FusionEnv env("force");
  Inputs in = make({2, 14, 64, 64, 3, 1}, DType::bf16, 71);
  in.w.set_requires_grad(true);
  ops::ConvFusionChoice how;
  ops::ConvBnStats r = ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p, &how);
  EXPECT_FALSE(how.fused);
  ops::sum(r.y).backward();
  EXPECT_TRUE(in.w.grad().defined());
}

#endif
