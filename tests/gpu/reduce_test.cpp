// GPU reductions against double-precision loops: sum/mean over dim sets that take each path
// (leading block, trailing block, middle block, scattered dims, everything, nothing), the NHWC
// bias-gradient case, keepdim, sum of squares and max |x| (single and multi-tensor).
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include <algorithm>

#include "core/cuda/cuda_ops.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

std::vector<double> ref_sum(const Tensor& x, const std::vector<int64_t>& dims, Shape* out_shape) {
  const Shape& s = x.shape();
  int64_t nd = x.dim();
  std::vector<bool> red(nd, false);
  for (int64_t d : dims) red[d < 0 ? d + nd : d] = true;
  out_shape->clear();
  for (int64_t d = 0; d < nd; ++d)
    if (!red[d]) out_shape->push_back(s[d]);
  std::vector<double> v = x.to_double_vector(), out(static_cast<size_t>(shape_numel(*out_shape)), 0.0);
  std::vector<int64_t> idx(nd, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t rem = static_cast<int64_t>(i);
    for (int64_t d = nd - 1; d >= 0; --d) {
      idx[d] = rem % s[d];
      rem /= s[d];
    }
    int64_t o = 0;
    for (int64_t d = 0; d < nd; ++d)
      if (!red[d]) o = o * s[d] + idx[d];
    out[o] += v[i];
  }
  return out;
}

}  // namespace

TEST(CudaReduce, SumAndMeanOverDimSets) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  struct Case {
    Shape s;
    std::vector<int64_t> dims;
  };
  std::vector<Case> cases = {{{8, 17, 19, 67}, {0, 1, 2}},  // bias gradient of NHWC
                             {{3, 5, 7}, {2}},              {{3, 5, 7}, {-1, -2}},
                             {{3, 5, 7}, {1}},              {{3, 5, 7, 2}, {0, 2}},  // scattered: permuted first
                             {{3, 5, 7}, {0, 1, 2}},        {{3, 5, 7}, {}},
                             {{1, 5, 1, 3}, {0, 2}},        {{4, 1}, {1}},
                             {{2000, 3}, {0}},              {{3, 50000}, {1}},
                             {{6, 0, 4}, {1}}};
  for (DType t : {DType::f32, DType::bf16})
    for (const Case& c : cases) {
      Tensor x = rand_cpu(c.s, 21, t);
      Shape os;
      std::vector<double> want = ref_sum(x, c.dims, &os);
      Tensor y = cuda::sum(x.to(gpu()), c.dims);
      ASSERT_EQ(y.shape(), os) << shape_str(c.s);
      std::string what = std::string("sum ") + dtype_name(t) + " " + shape_str(c.s) + " over " + shape_str(c.dims);
      gputest::expect_near_all(y, want, 1e-4, 2 * gputest::rounding(t) + 1e-5, what);
      int64_t count = 1;
      for (int64_t d : c.dims) count *= c.s[d < 0 ? d + c.s.size() : d];
      if (count == 0) continue;
      for (double& w : want) w /= static_cast<double>(count);
      gputest::expect_near_all(cuda::mean(x.to(gpu()), c.dims), want, 1e-5, 2 * gputest::rounding(t) + 1e-5,
                               "mean: " + what);
    }
  Tensor k = cuda::sum(rand_cpu({3, 4, 5}, 1).to(gpu()), {1}, true);
  EXPECT_EQ(k.shape(), Shape({3, 1, 5}));
  EXPECT_THROW(cuda::sum(rand_cpu({3, 4}, 1).to(gpu()), {2}), Error);
  EXPECT_THROW(cuda::mean(Tensor::zeros({3, 0}, DType::f32, gpu()), {1}), Error);
}

TEST(CudaReduce, LargeSumIsAccurate) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  // 2^24 + 2 ones (representable in f32): a naive f32 running sum stops at 2^24.
  int64_t n = (int64_t(1) << 24) + 2;
  Tensor x = Tensor::ones({n}, DType::f32, gpu());
  EXPECT_EQ(cuda::sum(x, {0}).item(), static_cast<double>(n));
  EXPECT_NEAR(cuda::sum_of_squares(x), static_cast<double>(n), 0.5);
}

TEST(CudaReduce, SumOfSquaresAndMaxAbs) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor a = rand_cpu({1000, 37}, 3), b = rand_cpu({16385}, 4, DType::bf16), c = rand_cpu({1}, 5);
  double sa = 0, ma = 0, sb = 0;
  for (double v : a.to_double_vector()) {
    sa += v * v;
    ma = std::max(ma, std::fabs(v));
  }
  for (double v : b.to_double_vector()) sb += v * v;
  double sc = c.item() * c.item();
  EXPECT_NEAR(cuda::sum_of_squares(a.to(gpu())), sa, 1e-5 * sa);
  EXPECT_EQ(cuda::max_abs(a.to(gpu())), ma);
  EXPECT_NEAR(cuda::sum_of_squares(std::vector<Tensor>{a.to(gpu()), b.to(gpu()), c.to(gpu()),
                                                       Tensor::empty({0}, DType::f32, gpu())}),
              sa + sb + sc, 1e-5 * (sa + sb + sc));
  EXPECT_EQ(cuda::sum_of_squares(std::vector<Tensor>{}), 0.0);
  Tensor n = Tensor::from_vector(std::vector<float>{1.f, NAN, 2.f}, {3}, DType::f32, gpu());
  EXPECT_TRUE(std::isnan(cuda::max_abs(n)));
}

#endif  // KILN_WITH_CUDA
