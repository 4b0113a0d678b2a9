// GPU softmax cross-entropy (forward and backward, label smoothing, i64/i32 labels, f32/bf16
// logits) and softmax against double-precision references written here.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

struct CeRef {
  double loss;
  std::vector<double> grad;  // d(mean loss)/d logits
};

CeRef ref_ce(const Tensor& logits, const std::vector<int64_t>& labels, double e) {
  int64_t N = logits.size(0), K = logits.size(1);
  std::vector<double> x = logits.to_double_vector();
  CeRef r{0.0, std::vector<double>(x.size())};
  for (int64_t i = 0; i < N; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < K; ++j) m = std::max(m, x[i * K + j]);
    double se = 0;
    for (int64_t j = 0; j < K; ++j) se += std::exp(x[i * K + j] - m);
    double lse = m + std::log(se);
    for (int64_t j = 0; j < K; ++j) {
      double t = (j == labels[i] ? 1.0 - e : 0.0) + e / static_cast<double>(K);
      r.loss += -t * (x[i * K + j] - lse) / static_cast<double>(N);
      r.grad[i * K + j] = (std::exp(x[i * K + j] - lse) - t) / static_cast<double>(N);
    }
  }
  return r;
}

}  // namespace

TEST(CudaLoss, CrossEntropyForwardBackward) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  struct Case {
    int64_t N, K;
  };
  for (Case c : {Case{1, 1}, Case{4, 10}, Case{33, 1000}, Case{7, 2049}})
    for (double e : {0.0, 0.1})
      for (DType t : {DType::f32, DType::bf16, DType::f16})
        for (DType lt : {DType::i64, DType::i32}) {
          Tensor logits = rand_cpu({c.N, c.K}, 7, t, 3.0);
          std::vector<int64_t> labels;
          for (int64_t i = 0; i < c.N; ++i) labels.push_back((i * 7919) % c.K);
          CeRef ref = ref_ce(logits, labels, e);
          Tensor lg = logits.to(gpu()), lb = Tensor::from_vector(labels, {c.N}, lt, gpu());
          Tensor loss = cuda::cross_entropy_forward(lg, lb, e);
          std::string what = "N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) + " e=" + std::to_string(e) + " " +
                             dtype_name(t) + " labels " + dtype_name(lt);
          ASSERT_EQ(loss.shape(), Shape{}) << what;
          ASSERT_EQ(loss.dtype(), DType::f32) << what;
          EXPECT_NEAR(loss.item(), ref.loss, 1e-5 * std::max(1.0, std::fabs(ref.loss))) << what;
          // Upstream gradient 2.5: the result scales with it.
          Tensor g = cuda::cross_entropy_backward(Tensor::scalar(2.5, DType::f32, gpu()), lg, lb, e);
          ASSERT_EQ(g.dtype(), t);
          std::vector<double> want = ref.grad;
          for (double& w : want) w *= 2.5;
          gputest::expect_near_all(g, want, 1e-7, 2 * gputest::rounding(t) + 1e-5, "grad " + what);
        }
}

TEST(CudaLoss, BadLabelsAndArguments) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor lg = rand_cpu({3, 5}, 1).to(gpu());
  Tensor bad = Tensor::from_vector(std::vector<int64_t>{0, 5, 1}, {3}, DType::i64, gpu());
  EXPECT_TRUE(std::isnan(cuda::cross_entropy_forward(lg, bad, 0.0).item()));
  Tensor neg = Tensor::from_vector(std::vector<int64_t>{0, -1, 1}, {3}, DType::i64, gpu());
  EXPECT_FALSE(cuda::all_finite(cuda::cross_entropy_backward(Tensor::scalar(1.0, DType::f32, gpu()), lg, neg, 0.0)));
  EXPECT_THROW(cuda::cross_entropy_forward(lg, Tensor::zeros({4}, DType::i64, gpu()), 0.0), Error);
  EXPECT_THROW(cuda::cross_entropy_forward(lg, Tensor::zeros({3}, DType::f32, gpu()), 0.0), Error);
  EXPECT_THROW(cuda::cross_entropy_forward(lg.reshape({15}), Tensor::zeros({15}, DType::i64, gpu()), 0.0), Error);
}

TEST(CudaLoss, Softmax) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor x = rand_cpu({9, 300}, 3, t, 4.0);
    std::vector<double> v = x.to_double_vector(), want(v.size());
    for (int i = 0; i < 9; ++i) {
      double m = -INFINITY, s = 0;
      for (int j = 0; j < 300; ++j) m = std::max(m, v[i * 300 + j]);
      for (int j = 0; j < 300; ++j) s += std::exp(v[i * 300 + j] - m);
      for (int j = 0; j < 300; ++j) want[i * 300 + j] = std::exp(v[i * 300 + j] - m) / s;
    }
    gputest::expect_near_all(cuda::softmax(x.to(gpu())), want, 1e-7, 2 * gputest::rounding(t) + 1e-5,
                             std::string("softmax ") + dtype_name(t));
  }
}

// The trainer's per-step statistics on the device: loss * weight summed while finite, the rows whose
// first maximum is the label counted (1000 rows: several per thread of the one block), and the first
// non-finite loss recorded with its step; nothing read back until the end.
TEST(CudaLoss, AccumulateStepStats) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const int64_t N = 1000, K = 7;
  Tensor logits = rand_cpu({N, K}, 5, DType::bf16);
  std::vector<double> v = logits.to_double_vector();
  std::vector<int64_t> labels(N);
  int64_t want_correct = 0;
  for (int64_t i = 0; i < N; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < K; ++j)
      if (v[i * K + j] > v[i * K + best]) best = j;
    labels[i] = (i % 3 == 0) ? best : (best + 1) % K;
    want_correct += labels[i] == best;
  }
  Tensor acc = Tensor::zeros({5}, DType::f64, gpu());
  Tensor lg = logits.to(gpu()), y = Tensor::from_vector(labels, {N}).to(gpu());
  auto scalar = [&](double x) { return Tensor::full({}, x, DType::f32, gpu()); };
  cuda::accumulate_step_stats(acc, scalar(2.5), lg, y, 4.0, 0);
  cuda::accumulate_step_stats(acc, scalar(NAN), lg, y, 4.0, 1);
  cuda::accumulate_step_stats(acc, scalar(INFINITY), lg, y, 4.0, 2);
  cuda::accumulate_step_stats(acc, scalar(0.5), lg, y, 2.0, 3);
  std::vector<double> got = acc.to_double_vector();
  EXPECT_EQ(got[0], 2.5 * 4 + 0.5 * 2);
  EXPECT_EQ(got[1], 4.0 * want_correct);
  EXPECT_EQ(got[2], 2.0);
  EXPECT_EQ(got[3], 1.0) << "the first non-finite step";
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_THROW(cuda::accumulate_step_stats(Tensor::zeros({4}, DType::f64, gpu()), scalar(1), lg, y, 1, 0), Error);
}

#endif  // KILN_WITH_CUDA
