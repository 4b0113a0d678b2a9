// SiLU on the GPU (core/cuda/silu_cuda.cu, through the op and its kernel slots) against the CPU op:
// forward and backward in f32/f16/bf16, and the extremes.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include <limits>

#include "core/autograd.h"
#include "core/ops/silu.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

TEST(CudaSilu, MatchesTheCpuOpInEveryDtype) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  EXPECT_NE(silu_forward_kernel.find(gpu()), nullptr);  // registered by cuda::register_kernels
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (const Shape& shape : {Shape{1}, Shape{3, 5, 7, 9}, Shape{1000003}}) {
      Tensor x = rand_cpu(shape, 7, t, 3.0);
      Tensor gy = rand_cpu(shape, 8, t);
      Tensor xc = x.clone(), xg = x.to(gpu());
      xc.set_requires_grad(true);
      xg.set_requires_grad(true);
      Tensor yc = ops::silu(xc), yg = ops::silu(xg);
      ASSERT_TRUE(yg.device().is_cuda());
      EXPECT_EQ(yg.dtype(), t);
      yc.backward(gy);
      yg.backward(gy.to(gpu()));
      const std::string what = std::string(dtype_name(t)) + " " + shape_str(shape);
      // f32 math on both sides; expf and std::exp may differ in the last bit, then one rounding to t.
      const double tol = gputest::rounding(t) + 1e-6;
      gputest::expect_near_all(yg, yc.to_double_vector(), tol, tol, "forward " + what);
      gputest::expect_near_all(xg.grad(), xc.grad().to_double_vector(), tol, tol, "backward " + what);
    }
}

TEST(CudaSilu, ExtremesAreThoseOfTheCpu) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::from_vector(std::vector<float>{inf, -100.f, 0.f, 100.f, -inf}, {5});
  std::vector<double> c = ops::silu(x).to_double_vector(), g = ops::silu(x.to(gpu())).to_double_vector();
  EXPECT_EQ(g[0], c[0]);
  EXPECT_EQ(g[1], c[1]);
  EXPECT_EQ(g[2], c[2]);
  EXPECT_EQ(g[3], c[3]);
  EXPECT_TRUE(std::isnan(g[4]) && std::isnan(c[4]));
}

#endif
