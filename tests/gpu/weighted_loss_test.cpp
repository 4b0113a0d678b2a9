// GPU cross-entropy with class weights (core/cuda/loss_cuda.cu) against the CPU op
// (tests/core/weighted_loss_test.cpp checks that one against a reference and torch): loss and
// gradient through ops::cross_entropy, with and without label smoothing, f32 and bf16 logits, and
// a batch whose labels all weigh 0. Skipped without a GPU.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/ops/loss.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

TEST(CudaLoss, WeightedCrossEntropyMatchesTheCpu) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (int64_t K : {5, 1000})
    for (double e : {0.0, 0.1})
      for (DType t : {DType::f32, DType::bf16}) {
        const int64_t N = 37;
        std::vector<int64_t> labels;
        std::vector<double> w;
        for (int64_t i = 0; i < N; ++i) labels.push_back((i * 7919) % K);
        for (int64_t k = 0; k < K; ++k) w.push_back(k % 3 == 0 ? 0.0 : 0.5 + static_cast<double>(k % 7));
        Tensor x = rand_cpu({N, K}, 11, t, 3.0);
        Tensor y = Tensor::from_vector(labels, {N});
        Tensor wt = Tensor::from_vector(w, {K}, DType::f32);
        Tensor xc = x.to(DType::f32).set_requires_grad(true);
        Tensor lc = ops::cross_entropy(xc, y, e, wt);
        lc.backward();
        // x.to(f32) above is x itself for f32 data, so x now requires grad: detach for a leaf on the GPU.
        Tensor xg = x.detach().to(gpu()).set_requires_grad(true);
        Tensor lg = ops::cross_entropy(xg, y.to(gpu()), e, wt.to(gpu()));
        lg.backward();
        std::string what = "K=" + std::to_string(K) + " e=" + std::to_string(e) + " " + dtype_name(t);
        EXPECT_NEAR(lg.to(Device::cpu()).item(), lc.item(), 1e-5 * std::max(1.0, std::fabs(lc.item()))) << what;
        gputest::expect_near_all(xg.grad().to(Device::cpu()), xc.grad().to_double_vector(), 1e-7,
                                 2 * gputest::rounding(t) + 1e-5, "grad " + what);
      }
}

TEST(CudaLoss, WeightedCrossEntropyOfAZeroWeightBatchIsZero) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor x = rand_cpu({3, 4}, 12).to(gpu()).set_requires_grad(true);
  Tensor y = Tensor::from_vector(std::vector<int64_t>{1, 1, 3}, {3}, DType::i64, gpu());
  Tensor w = Tensor::from_vector(std::vector<double>{1, 0, 2, 0}, {4}, DType::f32, gpu());
  Tensor loss = ops::cross_entropy(x, y, 0.1, w);
  EXPECT_EQ(loss.to(Device::cpu()).item(), 0.0);
  loss.backward();
  for (double g : x.grad().to(Device::cpu()).to_double_vector()) EXPECT_EQ(g, 0.0);
}

#endif  // KILN_WITH_CUDA
