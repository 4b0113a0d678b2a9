// NaN through the CUDA ops gives NaN where the CPU ops (and PyTorch) do: relu and its backward,
// max pooling, dropout, batch-norm statistics, LRN and the loss. tests/core/nan_test.cpp holds the
// CPU side and PyTorch's rules.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include <cmath>
#include <functional>

#include "core/autograd.h"
#include "core/ops/batch_norm.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "core/ops/lrn.h"
#include "core/ops/pool.h"
#include "core/ops/reduce.h"
#include "core/rng.h"

using namespace kiln;
using kiln::gputest::gpu;

namespace {

std::vector<bool> nan_mask(const Tensor& t) {
  std::vector<bool> m;
  for (double v : t.to(Device::cpu()).to_double_vector()) m.push_back(std::isnan(v));
  return m;
}

// (2, 4, 4, 3) with NaN at a few places.
Tensor with_nans(DType dt) {
  std::vector<double> v(2 * 16 * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i)) * 2.0;
  v[5 * 3 + 0] = NAN;
  v[(16 + 10) * 3 + 2] = NAN;
  return Tensor::from_vector(v, {2, 4, 4, 3}, DType::f64).to(dt);
}

}  // namespace

TEST(CudaNan, OpsPropagateNanLikeTheCpu) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = with_nans(dt);
    auto both = [&](const std::function<Tensor(const Tensor&)>& f, const char* what) {
      EXPECT_EQ(nan_mask(f(x.to(gpu()))), nan_mask(f(x))) << what;
    };
    both([](const Tensor& t) { return ops::relu(t); }, "relu");
    both([](const Tensor& t) { return ops::relu_backward(ops::relu(t), ops::relu(t)); }, "relu_backward");
    ops::Pool2dParams p;
    both([&](const Tensor& t) { return ops::max_pool2d(t, p); }, "max_pool2d");
    ops::Pool2dParams q;
    q.kernel_h = q.kernel_w = 3;
    q.stride_h = q.stride_w = 1;
    q.pad_h = q.pad_w = 1;
    both([&](const Tensor& t) { return ops::max_pool2d(t, q); }, "max_pool2d 3x3 s1 p1");
    both([](const Tensor& t) { return ops::global_avg_pool(t); }, "global_avg_pool");
    both([](const Tensor& t) { return ops::local_response_norm(t, 3); }, "lrn");
    both([](const Tensor& t) {
      default_generator().set_state({3, 0});
      return ops::dropout(t, 0.5, true);
    }, "dropout");
    both([&](const Tensor& t) {
      Tensor rm = Tensor::zeros({3}, DType::f32, t.device()), rv = Tensor::ones({3}, DType::f32, t.device());
      Tensor y = ops::batch_norm(t, Tensor(), Tensor(), rm, rv, true);
      EXPECT_EQ(nan_mask(rv), (std::vector<bool>{true, false, true})) << "running_var on " << t.device().str();
      return y;
    }, "batch_norm");
  }
  Tensor logits = Tensor::from_vector(std::vector<double>{1.0, NAN, 0.5, 0.2, 0.1, 0.3}, {2, 3}, DType::f64).to(DType::f32);
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 2}, {2});
  EXPECT_TRUE(std::isnan(ops::cross_entropy(logits.to(gpu()), labels.to(gpu())).to(Device::cpu()).item()));
  EXPECT_EQ(ops::argmax(logits.to(gpu()), 1).to(Device::cpu()).to_int_vector(), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(std::isnan(ops::max_abs(logits.to(gpu()))));
}

#endif  // KILN_WITH_CUDA
