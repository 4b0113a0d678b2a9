// ops::channel_moments on the GPU (core/cuda/channel_moments_cuda.cu's one-pass backward) against the
// CPU op: the sums and the gradient in f32/f16/bf16, for channel counts that take the 16-byte packs
// (ResNet's) and odd ones that do not.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/autograd.h"
#include "core/ops/channel_moments.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

TEST(CudaChannelMoments, MatchesTheCpuOpInEveryDtype) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  EXPECT_NE(channel_moments_backward_kernel.find(gpu()), nullptr);
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (const Shape& shape : {Shape{4, 7, 7, 256}, Shape{3, 5, 5, 3}, Shape{2, 9, 9, 24}}) {
      const int64_t c = shape.back();
      Tensor y = rand_cpu(shape, 11, t, 2.0);
      Tensor ws = rand_cpu({c}, 12), wq = rand_cpu({c}, 13), wy = rand_cpu(shape, 14, t);
      Tensor yc = y.clone(), yg = y.to(gpu());
      yc.set_requires_grad(true);
      yg.set_requires_grad(true);
      ops::ChannelMoments mc = ops::channel_moments(yc), mg = ops::channel_moments(yg);
      auto loss = [](const ops::ChannelMoments& m, const Tensor& yy, const Tensor& a, const Tensor& b,
                     const Tensor& w) {
        return ops::add(ops::add(ops::sum(ops::mul(m.sum, a)), ops::sum(ops::mul(m.sumsq, b))),
                        ops::sum(ops::mul(yy, w).to(DType::f32)));
      };
      loss(mc, yc, ws, wq, wy).backward();
      loss(mg, yg, ws.to(gpu()), wq.to(gpu()), wy.to(gpu())).backward();
      const std::string what = std::string(dtype_name(t)) + " " + shape_str(shape);
      gputest::expect_near_all(mg.sum, mc.sum.to_double_vector(), 1e-3, 1e-4, "sum " + what);
      gputest::expect_near_all(mg.sumsq, mc.sumsq.to_double_vector(), 1e-3, 1e-4, "sumsq " + what);
      ASSERT_EQ(yg.grad().dtype(), t);
      // f32 math on both sides, then one rounding to t (and the engine's add of y's other gradient).
      const double tol = 2 * gputest::rounding(t) + 1e-5;
      gputest::expect_near_all(yg.grad(), yc.grad().to_double_vector(), tol, tol, "dy " + what);
    }
}

#endif
