// GPU local response norm: the forward against PyTorch's definition in double, the backward against
// central differences of that double forward (independent of the kernel's closed form). Odd and
// even window sizes, a window wider than the channel count, NHWC and (N, C) inputs, f32 and bf16.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

std::vector<double> ref_lrn(const std::vector<double>& x, int64_t C, int64_t size, double alpha, double beta, double k) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t c = static_cast<int64_t>(i) % C;
    size_t row = i - static_cast<size_t>(c);
    double s = 0;
    for (int64_t j = c - size / 2; j <= c + (size - 1) / 2; ++j)
      if (j >= 0 && j < C) s += x[row + j] * x[row + j];
    y[i] = x[i] * std::pow(k + alpha / static_cast<double>(size) * s, -beta);
  }
  return y;
}

}  // namespace

TEST(CudaLrn, ForwardAndBackward) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  struct Case {
    Shape s;
    int64_t size;
    double alpha, beta, k;
  };
  std::vector<Case> cases = {{{2, 3, 3, 7}, 5, 1e-4, 0.75, 1.0},  // AlexNet's
                             {{2, 2, 3, 8}, 4, 0.5, 0.75, 2.0},   // even window, strong normalisation
                             {{3, 11}, 3, 1.0, 0.5, 1.0},
                             {{1, 2, 2, 7}, 9, 0.3, 1.0, 1.0},     // window wider than C
                             {{2, 2, 2, 5}, 1, 0.2, 0.75, 1.0}};
  for (DType t : {DType::f32, DType::bf16})
    for (const Case& c : cases) {
      Tensor x = rand_cpu(c.s, 5, t, 1.5);
      Tensor gy = rand_cpu(c.s, 6, t);
      int64_t C = c.s.back();
      std::vector<double> xv = x.to_double_vector(), gv = gy.to_double_vector();
      std::string what = shape_str(c.s) + " size " + std::to_string(c.size) + " " + dtype_name(t);
      double tol = 2 * gputest::rounding(t) + 1e-5;
      gputest::expect_near_all(cuda::lrn_forward(x.to(gpu()), c.size, c.alpha, c.beta, c.k),
                               ref_lrn(xv, C, c.size, c.alpha, c.beta, c.k), tol, tol, "forward " + what);
      std::vector<double> want(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {  // d/dx_i of sum(gy * y)
        std::vector<double> xp = xv, xm = xv;
        xp[i] += 1e-6;
        xm[i] -= 1e-6;
        std::vector<double> yp = ref_lrn(xp, C, c.size, c.alpha, c.beta, c.k), ym = ref_lrn(xm, C, c.size, c.alpha, c.beta, c.k);
        double d = 0;
        for (size_t j = 0; j < yp.size(); ++j) d += gv[j] * (yp[j] - ym[j]);
        want[i] = d / 2e-6;
      }
      gputest::expect_near_all(cuda::lrn_backward(gy.to(gpu()), x.to(gpu()), c.size, c.alpha, c.beta, c.k), want,
                               2 * tol, 2 * tol, "backward " + what);
    }
  EXPECT_THROW(cuda::lrn_forward(Tensor::zeros({4}, DType::f32, gpu()), 5, 1e-4, 0.75, 1.0), Error);
  EXPECT_THROW(cuda::lrn_forward(Tensor::zeros({2, 4}, DType::f32, gpu()), 0, 1e-4, 0.75, 1.0), Error);
}

#endif  // KILN_WITH_CUDA
