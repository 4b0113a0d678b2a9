// cross_entropy and softmax: loss and gradient against naive double-precision loops (with and
// without label smoothing, i32 and i64 labels), numerical stability on huge logits, gradchecks,
// errors naming the label, and fixed cases against PyTorch.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "tests/core/nn_test_util.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::randn;

namespace {

// Mean over rows of -sum_k target_k log p_k, target = (1-e) onehot + e/K; and its gradient.
double reference(const std::vector<double>& z, const std::vector<int64_t>& y, int64_t K, double e,
                 std::vector<double>* grad) {
  int64_t N = static_cast<int64_t>(y.size());
  double loss = 0;
  if (grad) grad->assign(z.size(), 0.0);
  for (int64_t i = 0; i < N; ++i) {
    double m = z[i * K];
    for (int64_t k = 1; k < K; ++k) m = std::max(m, z[i * K + k]);
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += std::exp(z[i * K + k] - m);
    for (int64_t k = 0; k < K; ++k) {
      double logp = z[i * K + k] - m - std::log(s);
      double target = (k == y[i] ? 1 - e : 0.0) + e / K;
      loss -= target * logp / N;
      if (grad) (*grad)[i * K + k] = (std::exp(logp) - target) / N;
    }
  }
  return loss;
}

std::vector<int64_t> labels_for(int64_t N, int64_t K, uint64_t seed) {
  std::vector<int64_t> y(N);
  for (int64_t i = 0; i < N; ++i) y[i] = static_cast<int64_t>(mix64(seed + i) % static_cast<uint64_t>(K));
  return y;
}

}  // namespace

TEST(CrossEntropy, MatchesReference) {
  struct Case {
    int64_t N, K;
    double e;
    DType labels;
  };
  for (const Case& c : {Case{4, 10, 0.0, DType::i64}, Case{1, 3, 0.1, DType::i32}, Case{7, 1, 0.0, DType::i64},
                        Case{64, 1000, 0.2, DType::i32}, Case{5, 6, 1.0, DType::i64}, Case{3, 5, 0.0, DType::i32}}) {
    for (DType dt : {DType::f32, DType::f64}) {
      SCOPED_TRACE("N " + std::to_string(c.N) + " K " + std::to_string(c.K) + " e " + std::to_string(c.e) + " " +
                   dtype_name(dt) + " labels " + dtype_name(c.labels));
      Tensor z = randn({c.N, c.K}, 70, dt, 3.0).set_requires_grad(true);
      std::vector<int64_t> y = labels_for(c.N, c.K, 71);
      std::vector<double> g;
      double want = reference(z.to_double_vector(), y, c.K, c.e, &g);
      Tensor loss = ops::cross_entropy(z, Tensor::from_vector(y, {c.N}, c.labels), c.e);
      EXPECT_EQ(loss.dim(), 0);
      EXPECT_EQ(loss.dtype(), dt);
      double tol = dt == DType::f64 ? 1e-12 : 1e-5;
      EXPECT_NEAR(loss.item(), want, tol * (1 + std::fabs(want)));
      loss.backward();
      expect_close(z.grad(), g, tol, tol, "dlogits");
    }
  }
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
  // NOTE: exp(1000) overflows f32 and f64 alike; only the max-shifted log-sum-exp survives.
  std::vector<double> zv{1000, -1000, 999, 0, 5000, 4990, -3000, 2};
  std::vector<int64_t> y{2, 1};
  std::vector<double> g;
  double want = reference(zv, y, 4, 0.1, &g);
  Tensor z = Tensor::from_vector(zv, {2, 4}, DType::f32).set_requires_grad(true);
  Tensor loss = ops::cross_entropy(z, Tensor::from_vector(y, {2}), 0.1);
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_NEAR(loss.item(), want, 1e-4);
  loss.backward();
  expect_close(z.grad(), g, 1e-6, 1e-5, "dlogits");
}

TEST(CrossEntropy, Gradcheck) {
  for (double e : {0.0, 0.1}) {
    Tensor z = randn({5, 7}, 72, DType::f64, 2.0).set_requires_grad(true);
    Tensor y = Tensor::from_vector(labels_for(5, 7, 73), {5});
    kiln::testing::gradcheck([y, e](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], y, e); }, {z},
                             "cross_entropy e " + std::to_string(e));
  }
  Tensor zf = randn({3, 4}, 74).set_requires_grad(true);
  Tensor yf = Tensor::from_vector(std::vector<int64_t>{0, 3, 1}, {3}, DType::i32);
  kiln::testing::gradcheck([yf](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], yf, 0.1); }, {zf},
                           "cross_entropy f32");
}

TEST(CrossEntropy, GradientScalesWithTheUpstreamGradient) {
  // loss * 3 -> the upstream gradient reaching cross_entropy's backward is 3, not 1.
  Tensor z = randn({4, 5}, 75, DType::f64).set_requires_grad(true);
  std::vector<int64_t> y = labels_for(4, 5, 76);
  std::vector<double> g;
  reference(z.to_double_vector(), y, 5, 0.0, &g);
  ops::mul_scalar(ops::cross_entropy(z, Tensor::from_vector(y, {4})), 3.0).backward();
  for (double& v : g) v *= 3;
  expect_close(z.grad(), g, 1e-12, 1e-12, "3 * dlogits");
}

TEST(CrossEntropy, Bf16LogitsGiveAnF32Loss) {
  Tensor z = randn({6, 9}, 77, DType::f32, 2.0).to(DType::bf16).set_requires_grad(true);
  std::vector<int64_t> y = labels_for(6, 9, 78);
  Tensor loss = ops::cross_entropy(z, Tensor::from_vector(y, {6}));
  EXPECT_EQ(loss.dtype(), DType::f32);
  EXPECT_NEAR(loss.item(), reference(z.to_double_vector(), y, 9, 0.0, nullptr), 1e-5);
  loss.backward();
  EXPECT_EQ(z.grad().dtype(), DType::bf16);
}

TEST(CrossEntropy, ErrorsNameLabelIndexAndShapes) {
  using kiln::testing::expect_error;
  Tensor z = Tensor::zeros({4, 10});
  expect_error([&] { ops::cross_entropy(z, Tensor::from_vector(std::vector<int64_t>{1, 2, 10, 3}, {4})); },
               {"cross_entropy", "label 10", "index 2", "[0, 10)", "f32[4, 10]"});
  expect_error([&] { ops::cross_entropy(z, Tensor::from_vector(std::vector<int64_t>{-1, 2, 0, 3}, {4}, DType::i32)); },
               {"cross_entropy", "label -1", "index 0"});
  expect_error([&] { ops::cross_entropy(z, Tensor::zeros({4})); }, {"cross_entropy", "i64 or i32", "f32[4]"});
  expect_error([&] { ops::cross_entropy(z, Tensor::zeros({3}, DType::i64)); },
               {"cross_entropy", "i64[3]", "f32[4, 10]", "[4]"});
  expect_error([&] { ops::cross_entropy(Tensor::zeros({10}), Tensor::zeros({1}, DType::i64)); },
               {"cross_entropy", "(N, K)", "f32[10]"});
  expect_error([&] { ops::cross_entropy(z, Tensor::zeros({4}, DType::i64), 1.5); },
               {"cross_entropy", "label_smoothing", "1.5"});
}

TEST(Softmax, MatchesReference) {
  for (Shape s : {Shape{3, 5}, Shape{1, 1}, Shape{2, 3, 7}, Shape{40, 1000}}) {
    SCOPED_TRACE(shape_str(s));
    Tensor z = randn(s, 79, DType::f32, 4.0).set_requires_grad(true);
    std::vector<double> zv = z.to_double_vector(), want(zv.size());
    int64_t K = s.back();
    for (size_t r = 0; r < zv.size() / K; ++r) {
      double m = -INFINITY, sum = 0;
      for (int64_t k = 0; k < K; ++k) m = std::max(m, zv[r * K + k]);
      for (int64_t k = 0; k < K; ++k) sum += std::exp(zv[r * K + k] - m);
      for (int64_t k = 0; k < K; ++k) want[r * K + k] = std::exp(zv[r * K + k] - m) / sum;
    }
    Tensor p = ops::softmax(z);
    EXPECT_EQ(p.shape(), s);
    EXPECT_FALSE(p.requires_grad());  // not recorded
    expect_close(p, want, 1e-6, 1e-5, "softmax");
  }
  Tensor big = Tensor::from_vector(std::vector<double>{1000, 999, -1000}, {1, 3}, DType::f32);
  expect_close(ops::softmax(big), {0.7310585786, 0.2689414214, 0.0}, 1e-6, 1e-6, "huge logits");
  EXPECT_EQ(ops::softmax(big.to(DType::bf16)).dtype(), DType::bf16);
  kiln::testing::expect_error([] { ops::softmax(Tensor::zeros({3}, DType::i32)); }, {"softmax", "i32[3]"});
}

TEST(CrossEntropy, MatchesPyTorch) {
  // Generated once with torch 1.13 (/usr/bin/python3):
  //   z = torch.tensor([math.sin(0.9*i+0.2)*3.0 for i in range(12)], dtype=torch.float64).reshape(3, 4)
  //   y = torch.tensor([2, 0, 3])
  //   F.cross_entropy(z, y, label_smoothing=e) and z.grad for e = 0 and 0.1; torch.softmax(z, 1)
  Tensor y = Tensor::from_vector(std::vector<int64_t>{2, 0, 3}, {3});
  struct Want {
    double e, loss;
    std::vector<double> grad;
  };
  for (const Want& w :
       {Want{0.0, 2.9267008433890758,
             {0.017973723079, 0.143527255384, -0.181801586895, 0.020300608432, -0.309872419315, 0.007323876054,
              0.022133882127, 0.280414661134, 0.154861585509, 0.156479175163, 0.020390664552, -0.331731425224}},
        Want{0.1, 2.853707861003581,
             {0.009640389746, 0.135193922051, -0.156801586895, 0.011967275099, -0.284872419315, -0.00100945728,
              0.013800548794, 0.272081327801, 0.146528252175, 0.14814584183, 0.012057331219, -0.306731425224}}}) {
    SCOPED_TRACE("e " + std::to_string(w.e));
    Tensor z = kiln::testing::wave_tensor({3, 4}, DType::f64, 0.9, 0.2, 3.0).set_requires_grad(true);
    Tensor loss = ops::cross_entropy(z, y, w.e);
    EXPECT_NEAR(loss.item(), w.loss, 1e-12);
    loss.backward();
    expect_close(z.grad(), w.grad, 1e-11, 0, "dlogits");
  }
  expect_close(ops::softmax(kiln::testing::wave_tensor({3, 4}, DType::f64, 0.9, 0.2, 3.0)),
               {0.053921169237, 0.430581766152, 0.454595239316, 0.060901825296, 0.070382742056, 0.021971628161,
                0.066401646382, 0.841243983402, 0.464584756526, 0.46943752549, 0.061171993656, 0.004805724328},
               1e-11, 0, "softmax");
}
