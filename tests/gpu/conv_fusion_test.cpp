// The cuDNN runtime fusion (core/cuda/conv_fusion_cuda.cu, through ops::conv_scale_bias_relu_stats)
// against today's unfused ops on the same GPU (scale and bias elementwise, ReLU, the existing conv2d,
// the per-channel sums: ops::conv_scale_bias_relu_stats_unfused) on ResNet-50's conv shapes in f16
// and bf16; a shape cuDNN refuses falls back and still matches; the KILN_CUDNN_FUSION switch; the
// timed choice is made once per shape and kept; the same for the backward (stage 3: cuDNN's wgrad and
// dgrad + dReLU graphs, ops::conv_scale_bias_relu_backward). Tolerances (stated per check below) are in units of
// one rounding of the dtype (gputest::rounding: bf16 8e-3, f16 1e-3): the fused graph keeps the
// scaled, biased, ReLU'd activations in f32 where the unfused ops round them to the dtype twice.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include <cmath>
#include <cstdlib>
#include <optional>
#include <tuple>

#include "core/autograd.h"
#include "core/cuda/runtime.h"  // the compute capability (ConvBNwgrad is Hopper's)
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
      if (!how.fused) {
        EXPECT_EQ(how.why.rfind("refused: ", 0), 0u) << what << ": " << how.why;
      }
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

// --- the backward (stage 3): ops::conv_scale_bias_relu_backward against its unfused chain ---------------

// The gradients of a random gy (N(0, 1)): the fused side against the unfused ops. Tolerances, as relative
// L2 errors of each whole tensor (rel_l2 below): the dgrad graph's ReLU mask is of the pre-activation
// in f32, the unfused chain's of it rounded to the dtype (mul and add, two roundings), so elements whose
// pre-activation lies within a rounding of 0 (about 0.1% of them in bf16, 0.01% in f16) differ by their
// whole value; that moves dx, dscale and dbias by a few percent of their norm in bf16. dw sees those
// flips only as a change of a near 0. f32 may run on TF32 tensor cores on either side (10-bit mantissa).
namespace {

struct BackwardTol {
  double dx, sums, dw;
};
BackwardTol backward_tol(DType t) {
  if (t == DType::bf16) return {0.08, 0.08, 0.03};
  if (t == DType::f16) return {0.02, 0.02, 5e-3};
  return {0.01, 0.01, 5e-3};
}

double rel_l2(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
  double e = 0, n = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    e += (g[i] - w[i]) * (g[i] - w[i]);
    n += w[i] * w[i];
  }
  return std::sqrt(e / std::max(n, 1e-30));
}

void expect_backward_matches(const ops::ConvBnGrads& got, const ops::ConvBnGrads& want, DType t, const std::string& what) {
  const BackwardTol tol = backward_tol(t);
  const Tensor* g[] = {&got.dx, &got.dscale, &got.dbias, &got.dw};
  const Tensor* w[] = {&want.dx, &want.dscale, &want.dbias, &want.dw};
  const char* names[] = {"dx", "dscale", "dbias", "dw"};
  const double tols[] = {tol.dx, tol.sums, tol.sums, tol.dw};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(g[i]->defined()) << names[i] << " " << what;
    ASSERT_EQ(g[i]->shape(), w[i]->shape()) << names[i] << " " << what;
    EXPECT_EQ(g[i]->dtype(), t) << names[i] << " " << what;
    const double e = rel_l2(*g[i], *w[i]);
    EXPECT_LE(e, tols[i]) << names[i] << " " << what << ": relative L2 error";
    std::vector<double> v = g[i]->to_double_vector();
    for (double x : v)
      if (!std::isfinite(x)) {
        ADD_FAILURE() << names[i] << " " << what << ": non-finite";
        break;
      }
  }
}

constexpr ops::ConvFusionNeeds kAll{true, true, true, true};

Tensor random_gy(const Inputs& in, uint64_t seed) {
  const Shape ys = ops::conv2d_output_shape(in.x.shape(), in.w.shape(), in.p);
  return rand_cpu(ys, seed, in.x.dtype()).to(gpu());
}

// ResNet-50's bottleneck convolutions, batch 2 to 8: the 1x1s, the 3x3 stride 1 and 2.
const std::vector<ConvCase> kResNet50Backward = {
    {2, 56, 64, 64, 1, 1},    {2, 56, 64, 64, 3, 1},    {4, 56, 64, 256, 1, 1}, {4, 56, 256, 64, 1, 1},
    {4, 56, 128, 128, 3, 2},  {4, 28, 128, 128, 3, 1},  {8, 14, 256, 256, 3, 1}, {8, 7, 512, 2048, 1, 1},
    {8, 7, 2048, 512, 1, 1},  {8, 14, 1024, 256, 1, 1}};

}  // namespace

TEST(CudaConvFusion, FusedBackwardMatchesTheUnfusedOpsOnResNet50Shapes) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::Watchdog dog(300, "CudaConvFusion.FusedBackwardMatchesTheUnfusedOpsOnResNet50Shapes");
  EXPECT_NE(conv_bn_stats_backward_kernel.find(gpu()), nullptr);  // registered by cuda::register_kernels
  gputest::FusionEnv env("force");
  const bool hopper = kiln::cuda::context(gpu().index).cc_major >= 9;
  for (DType t : {DType::f16, DType::bf16, DType::f32})
    for (const ConvCase& c : kResNet50Backward) {
      const std::string what = std::string(dtype_name(t)) + " " + c.str();
      Inputs in = make(c, t, 81);
      const Tensor gy = random_gy(in, 82);
      ops::ConvFusionBackwardChoice how;
      const ops::ConvBnGrads got = ops::conv_scale_bias_relu_backward(gy, in.x, in.scale, in.bias, in.w, in.p, kAll, &how);
      const ops::ConvBnGrads want =
          ops::conv_scale_bias_relu_backward_unfused(gy, in.x, in.scale, in.bias, in.w, in.p, kAll);
      std::printf("  backward %s: dgrad %s (%s), wgrad %s (%s)\n", what.c_str(), how.dgrad.fused ? "fused" : "unfused",
                  how.dgrad.why.c_str(), how.wgrad.fused ? "fused" : "unfused", how.wgrad.why.c_str());
      // cuDNN's samples run dgrad + dReLU on Ampere and Hopper, and the scale-bias-ReLU wgrad
      // (ConvBNwgrad) on Hopper and newer only, in f16; a refusal there is a finding to look into for
      // f16/bf16 (f32 may be refused).
      if (t != DType::f32) {
        EXPECT_TRUE(how.dgrad.fused) << what << ": " << how.dgrad.why;
        if (hopper) {
          EXPECT_TRUE(how.wgrad.fused) << what << ": " << how.wgrad.why;
        }
      }
      expect_backward_matches(got, want, t, what);
      // the cached graphs again: the same values (the sums in a fixed order, no atomics)
      const ops::ConvBnGrads again = ops::conv_scale_bias_relu_backward(gy, in.x, in.scale, in.bias, in.w, in.p, kAll);
      gputest::expect_near_all(again.dscale, got.dscale.to_double_vector(), 0, 0, "dscale again " + what);
      gputest::expect_near_all(again.dw, got.dw.to_double_vector(), 0, 0, "dw again " + what);
    }
}

TEST(CudaConvFusion, BackwardShapesCudnnRefusesFallBackAndMatch) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::FusionEnv env("force");
  for (const ConvCase& c : {ConvCase{2, 16, 3, 8, 3, 1}, ConvCase{2, 15, 5, 7, 3, 2}, ConvCase{3, 9, 7, 13, 1, 1}})
    for (DType t : {DType::f16, DType::bf16}) {
      const std::string what = std::string(dtype_name(t)) + " " + c.str();
      Inputs in = make(c, t, 91);
      const Tensor gy = random_gy(in, 92);
      ops::ConvFusionBackwardChoice how;
      const ops::ConvBnGrads got = ops::conv_scale_bias_relu_backward(gy, in.x, in.scale, in.bias, in.w, in.p, kAll, &how);
      const ops::ConvBnGrads want =
          ops::conv_scale_bias_relu_backward_unfused(gy, in.x, in.scale, in.bias, in.w, in.p, kAll);
      std::printf("  backward %s: dgrad %s (%s), wgrad %s (%s)\n", what.c_str(), how.dgrad.fused ? "fused" : "unfused",
                  how.dgrad.why.c_str(), how.wgrad.fused ? "fused" : "unfused", how.wgrad.why.c_str());
      for (const ops::ConvFusionChoice* h : {&how.dgrad, &how.wgrad})
        if (!h->fused) {
          EXPECT_EQ(h->why.rfind("refused: ", 0), 0u) << what << ": " << h->why;
        }
      expect_backward_matches(got, want, t, what);
    }
}

TEST(CudaConvFusion, BackwardSwitchOffRunsTheUnfusedOps) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::FusionEnv env("0");
  Inputs in = make({4, 28, 128, 128, 3, 1}, DType::bf16, 101);
  const Tensor gy = random_gy(in, 102);
  ops::ConvFusionBackwardChoice how;
  const ops::ConvBnGrads got = ops::conv_scale_bias_relu_backward(gy, in.x, in.scale, in.bias, in.w, in.p, kAll, &how);
  EXPECT_FALSE(how.dgrad.fused);
  EXPECT_FALSE(how.wgrad.fused);
  EXPECT_EQ(how.dgrad.why, "KILN_CUDNN_FUSION=0");
  EXPECT_EQ(how.wgrad.why, "KILN_CUDNN_FUSION=0");
  const ops::ConvBnGrads want = ops::conv_scale_bias_relu_backward_unfused(gy, in.x, in.scale, in.bias, in.w, in.p, kAll);
  // the same ops: the same values
  gputest::expect_near_all(got.dx, want.dx.to_double_vector(), 0, 0, "dx");
  gputest::expect_near_all(got.dscale, want.dscale.to_double_vector(), 0, 0, "dscale");
  gputest::expect_near_all(got.dbias, want.dbias.to_double_vector(), 0, 0, "dbias");
  gputest::expect_near_all(got.dw, want.dw.to_double_vector(), 0, 0, "dw");
}

TEST(CudaConvFusion, BackwardTimedChoiceIsMadeOnceAndKeptAndGivesOnlyWhatIsAsked) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::FusionEnv env(nullptr);  // the default: timed
  const ConvCase c{6, 28, 128, 128, 3, 1};
  Inputs in = make(c, DType::f16, 111);
  const Tensor gy = random_gy(in, 112);
  ops::ConvFusionBackwardChoice first, second;
  const ops::ConvBnGrads a = ops::conv_scale_bias_relu_backward(gy, in.x, in.scale, in.bias, in.w, in.p, kAll, &first);
  const ops::ConvBnGrads b = ops::conv_scale_bias_relu_backward(gy, in.x, in.scale, in.bias, in.w, in.p, kAll, &second);
  for (auto [f, s, name] : {std::tuple{&first.dgrad, &second.dgrad, "dgrad"}, std::tuple{&first.wgrad, &second.wgrad, "wgrad"}}) {
    std::printf("  backward f16 %s %s: fused %.3f ms, unfused %.3f ms -> %s\n", c.str().c_str(), name, f->fused_ms,
                f->unfused_ms, f->fused ? "fused" : "unfused");
    ASSERT_EQ(f->why, "timed") << name;
    EXPECT_GT(f->fused_ms, 0) << name;
    EXPECT_GT(f->unfused_ms, 0) << name;
    EXPECT_EQ(f->fused, f->fused_ms < f->unfused_ms) << name;
    EXPECT_EQ(s->fused, f->fused) << name;  // kept, not timed again
    EXPECT_EQ(s->fused_ms, f->fused_ms) << name;
  }
  const ops::ConvBnGrads want = ops::conv_scale_bias_relu_backward_unfused(gy, in.x, in.scale, in.bias, in.w, in.p, kAll);
  expect_backward_matches(a, want, DType::f16, "first " + c.str());
  expect_backward_matches(b, want, DType::f16, "second " + c.str());
  // w alone: the dgrad side is not run
  ops::ConvFusionBackwardChoice only;
  const ops::ConvBnGrads w = ops::conv_scale_bias_relu_backward(gy, in.x, in.scale, in.bias, in.w, in.p,
                                                                {false, false, false, true}, &only);
  EXPECT_FALSE(w.dx.defined() || w.dscale.defined() || w.dbias.defined());
  ASSERT_TRUE(w.dw.defined());
  EXPECT_EQ(only.dgrad.why, "not needed");
  EXPECT_LE(rel_l2(w.dw, want.dw), backward_tol(DType::f16).dw);
}

// The training op's autograd node runs the fused backward: its gradients under force against 0.
TEST(CudaConvFusion, TrainingOpBackwardFusedMatchesUnfused) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const ConvCase c{4, 14, 256, 256, 3, 1};
  std::vector<Tensor> grads[2];
  for (int fused = 0; fused < 2; ++fused) {
    gputest::FusionEnv env(fused ? "force" : "0");
    Inputs in = make(c, DType::bf16, 121);
    for (Tensor* t : {&in.x, &in.scale, &in.bias, &in.w}) t->set_requires_grad(true);
    ops::ConvBnStats r = ops::conv_scale_bias_relu_stats_train(in.x, in.scale, in.bias, in.w, in.p);
    ops::sum(ops::mul(r.y.to(DType::f32), random_gy(in, 122).to(DType::f32))).backward();
    for (Tensor* t : {&in.x, &in.scale, &in.bias, &in.w}) grads[fused].push_back(t->grad());
  }
  const BackwardTol tol = backward_tol(DType::bf16);
  const double tols[] = {tol.dx, tol.sums, tol.sums, tol.dw};
  const char* names[] = {"dx", "dscale", "dbias", "dw"};
  for (int i = 0; i < 4; ++i) EXPECT_LE(rel_l2(grads[1][i], grads[0][i]), tols[i]) << names[i];
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

// ops::conv_fusion_counts (what `kiln bench train fused_bn_conv=1` prints): each call that reaches the
// fused kernel counts, and those that ran the fused graph count as fused; with KILN_CUDNN_FUSION=0 none.
TEST(CudaConvFusion, CountsSayWhatRanFused) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Inputs in = make({2, 14, 64, 64, 3, 1}, DType::bf16, 101);
  {
    gputest::FusionEnv env("force");
    ops::reset_conv_fusion_counts();
    ops::ConvFusionChoice how;
    ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p, &how);
    ops::ConvFusionBackwardChoice back;
    const Tensor gy = random_gy(in, 102);
    ops::conv_scale_bias_relu_backward(gy, in.x, in.scale, in.bias, in.w, in.p, kAll, &back);
    const ops::ConvFusionCounts c = ops::conv_fusion_counts();
    EXPECT_EQ(c.forward, 1);
    EXPECT_EQ(c.forward_fused, how.fused ? 1 : 0);
    EXPECT_EQ(c.dgrad, 1);
    EXPECT_EQ(c.dgrad_fused, back.dgrad.fused ? 1 : 0);
    EXPECT_EQ(c.wgrad, 1);
    EXPECT_EQ(c.wgrad_fused, back.wgrad.fused ? 1 : 0);
  }
  gputest::FusionEnv env("0");
  ops::reset_conv_fusion_counts();
  ops::conv_scale_bias_relu_stats(in.x, in.scale, in.bias, in.w, in.p);
  const ops::ConvFusionCounts c = ops::conv_fusion_counts();
  EXPECT_EQ(c.forward, 1);
  EXPECT_EQ(c.forward_fused, 0);
}

#endif
