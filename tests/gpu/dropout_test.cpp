// GPU dropout: the mask must be exactly the CPU formula from core/rng.h (keep iff
// uniform_at(state, i) >= p, scale 1/(1-p)), so CPU and GPU runs and checkpoint recomputation agree.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#include "core/rng.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

TEST(CudaDropout, MaskIsTheCpuFormula) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (double p : {0.0, 0.1, 0.5, 0.9})
    for (DType t : {DType::f32, DType::bf16}) {
      Tensor x = rand_cpu({7, 13, 11}, 3, t);
      RngState st{1234567, 987654321};
      Tensor y = cuda::dropout_forward(x.to(gpu()), p, st);
      Tensor gy = rand_cpu({7, 13, 11}, 4, t);
      Tensor gx = cuda::dropout_backward(gy.to(gpu()), p, st);
      std::vector<double> xv = x.to_double_vector(), gv = gy.to_double_vector(), wy, wg;
      float scale = static_cast<float>(1.0 / (1.0 - p));
      int64_t kept = 0;
      for (size_t i = 0; i < xv.size(); ++i) {
        bool keep = uniform_at(st, i) >= static_cast<float>(p);
        kept += keep;
        // Same f32 product, rounded to t, as the device computes.
        auto r = [&](double v) { return Tensor::scalar(keep ? static_cast<float>(v) * scale : 0.f).to(t).item(); };
        wy.push_back(r(xv[i]));
        wg.push_back(r(gv[i]));
      }
      std::string what = "p=" + std::to_string(p) + " " + dtype_name(t);
      gputest::expect_near_all(y, wy, 0, 0, "forward " + what);
      gputest::expect_near_all(gx, wg, 0, 0, "backward " + what);
      double rate = static_cast<double>(kept) / static_cast<double>(xv.size());
      EXPECT_NEAR(rate, 1.0 - p, 0.05) << what;
    }
}

TEST(CudaDropout, OffsetsAdvanceTheStream) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  // Two draws of 1000 from offsets 0 and 1000 equal one draw of 2000.
  Tensor ones = Tensor::ones({2000}, DType::f32, gpu());
  RngState a{42, 0}, b{42, 1000};
  std::vector<double> whole = cuda::dropout_forward(ones, 0.5, a).to_double_vector();
  std::vector<double> first = cuda::dropout_forward(ones.slice(0, 0, 1000), 0.5, a).to_double_vector();
  std::vector<double> second = cuda::dropout_forward(ones.slice(0, 1000, 2000), 0.5, b).to_double_vector();
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(first, whole);
  EXPECT_THROW(cuda::dropout_forward(ones, 1.0, a), Error);
}

#endif  // KILN_WITH_CUDA
