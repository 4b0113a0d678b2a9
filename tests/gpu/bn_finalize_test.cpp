// ops::bn_finalize's CUDA kernels (core/cuda/bn_finalize_cuda.cu) against the CPU's: values, running
// statistics and gradients, f32 and bf16 outputs.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/autograd.h"
#include "core/ops/bn_finalize.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

TEST(CudaBnFinalize, MatchesTheCpuKernels) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  EXPECT_NE(bn_finalize_forward_kernel.find(gpu()), nullptr);
  const int64_t C = 300, count = 1000;
  for (DType out : {DType::f32, DType::bf16}) {
    Tensor mean = rand_cpu({C}, 81), spread = ops::add_scalar(ops::square(rand_cpu({C}, 82)), 0.1);
    Tensor s = ops::mul_scalar(mean, double(count)), q = ops::mul_scalar(ops::add(ops::square(mean), spread), double(count));
    Tensor gamma = ops::add_scalar(rand_cpu({C}, 83, DType::f32, 0.2), 1.0), beta = rand_cpu({C}, 84);
    Tensor rm = rand_cpu({C}, 85), rv = ops::add_scalar(ops::square(rand_cpu({C}, 86)), 1.0);
    Tensor ws = rand_cpu({C}, 87), wb = rand_cpu({C}, 88);
    auto run = [&](Device d, std::vector<Tensor>& in, Tensor& m, Tensor& v) {
      in = {s.to(d), q.to(d), gamma.to(d), beta.to(d)};
      for (Tensor& t : in) t.set_requires_grad(true);
      m = rm.to(d);
      v = rv.to(d);
      ops::BnFinalized f = ops::bn_finalize(in[0], in[1], count, in[2], in[3], m, v, 0.1, 1e-5, out);
      ops::add(ops::sum(ops::mul(f.scale.to(DType::f32), ws.to(d))), ops::sum(ops::mul(f.bias.to(DType::f32), wb.to(d))))
          .backward();
      return f;
    };
    std::vector<Tensor> c, g;
    Tensor mc, vc, mg, vg;
    const ops::BnFinalized fc = run(Device::cpu(), c, mc, vc), fg = run(gpu(), g, mg, vg);
    const std::string what = dtype_name(out);
    const double tol = out == DType::f32 ? 1e-6 : 1e-2;
    gputest::expect_near_all(fg.scale.to(DType::f32), fc.scale.to(DType::f32).to_double_vector(), tol, tol, "scale " + what);
    gputest::expect_near_all(fg.bias.to(DType::f32), fc.bias.to(DType::f32).to_double_vector(), tol, tol, "bias " + what);
    gputest::expect_near_all(mg, mc.to_double_vector(), 1e-6, 1e-6, "running_mean " + what);
    gputest::expect_near_all(vg, vc.to_double_vector(), 1e-6, 1e-6, "running_var " + what);
    const char* names[] = {"d sum", "d sumsq", "d gamma", "d beta"};
    for (size_t i = 0; i < 4; ++i)
      gputest::expect_near_all(g[i].grad(), c[i].grad().to_double_vector(), 1e-5, 1e-4, std::string(names[i]) + " " + what);
  }
}

#endif
