// cross_entropy with class weights (PyTorch's weighted mean, core/ops/loss.h): loss and gradient
// against a naive double-precision reference written from the definition, a gradient check, values
// from torch 1.13, the unweighted case as weights of 1, a batch of zero weight, and the errors.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops/loss.h"
#include "tests/core/nn_test_util.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::randn;

namespace {

// loss = sum_i sum_k -t_ik w_k log p_ik / sum_i w_{y_i}, with t = (1-e) onehot + e/K: for the
// one-hot part w_k = w_{y_i}; that is PyTorch's (1-e) * nll(weight) + (e/K) * sum w_k (-log p) / S.
double reference(const std::vector<double>& z, const std::vector<int64_t>& y, const std::vector<double>& w, double e,
                 std::vector<double>* grad) {
  const int64_t N = static_cast<int64_t>(y.size()), K = static_cast<int64_t>(w.size());
  double S = 0;
  for (int64_t i = 0; i < N; ++i) S += w[y[i]];
  std::vector<double> logp(z.size());
  double num = 0;
  for (int64_t i = 0; i < N; ++i) {
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < K; ++k) m = std::max(m, z[i * K + k]);
    for (int64_t k = 0; k < K; ++k) s += std::exp(z[i * K + k] - m);
    for (int64_t k = 0; k < K; ++k) logp[i * K + k] = z[i * K + k] - m - std::log(s);
    num -= (1 - e) * w[y[i]] * logp[i * K + y[i]];
    for (int64_t k = 0; k < K; ++k) num -= e / K * w[k] * logp[i * K + k];
  }
  if (grad) {  // d/dz_ik of the row's numerator, from d(-log p_ij)/dz_ik = p_ik - [j == k]
    grad->assign(z.size(), 0.0);
    double W = 0;
    for (double v : w) W += v;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t k = 0; k < K; ++k) {
        double p = std::exp(logp[i * K + k]);
        (*grad)[i * K + k] = ((1 - e) * w[y[i]] * (p - (k == y[i])) + e / K * (W * p - w[k])) / S;
      }
  }
  return num / S;
}

}  // namespace

TEST(WeightedCrossEntropy, MatchesReference) {
  const std::vector<double> w{0.5, 2.0, 0.0, 1.25, 3.0};
  const std::vector<int64_t> y{0, 1, 2, 3, 4, 1, 2};
  for (double e : {0.0, 0.1, 1.0})
    for (DType dt : {DType::f32, DType::f64}) {
      SCOPED_TRACE("e " + std::to_string(e) + " " + dtype_name(dt));
      Tensor z = randn({7, 5}, 80, dt, 3.0).set_requires_grad(true);
      std::vector<double> g;
      double want = reference(z.to_double_vector(), y, w, e, &g);
      Tensor loss = ops::cross_entropy(z, Tensor::from_vector(y, {7}), e, Tensor::from_vector(w, {5}, dt));
      EXPECT_EQ(loss.dtype(), dt);
      double tol = dt == DType::f64 ? 1e-12 : 1e-5;
      EXPECT_NEAR(loss.item(), want, tol * (1 + std::fabs(want)));
      loss.backward();
      expect_close(z.grad(), g, tol, tol, "dlogits");
    }
}

TEST(WeightedCrossEntropy, Gradcheck) {
  Tensor y = Tensor::from_vector(std::vector<int64_t>{3, 0, 2, 2, 1}, {5});
  Tensor w = Tensor::from_vector(std::vector<double>{0.2, 1.5, 0.0, 4.0}, {4}, DType::f64);
  for (double e : {0.0, 0.1}) {
    Tensor z = randn({5, 4}, 81, DType::f64, 2.0).set_requires_grad(true);
    kiln::testing::gradcheck([y, w, e](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], y, e, w); },
                             {z}, "weighted cross_entropy e " + std::to_string(e));
  }
}

TEST(WeightedCrossEntropy, MatchesPyTorch) {
  // Generated once with torch 1.13 (/usr/bin/python3):
  //   z = torch.tensor([math.sin(0.9*i+0.2)*3.0 for i in range(12)], dtype=torch.float64).reshape(3, 4)
  //   y = torch.tensor([2, 0, 3]); w = torch.tensor([0.5, 0.0, 1.0, 3.0], dtype=torch.float64)
  //   F.cross_entropy(z, y, weight=w, label_smoothing=e) and z.grad for e = 0 and 0.1
  Tensor y = Tensor::from_vector(std::vector<int64_t>{2, 0, 3}, {3});
  Tensor w = Tensor::from_vector(std::vector<double>{0.5, 0.0, 1.0, 3.0}, {4}, DType::f64);
  struct Want {
    double e, loss;
    std::vector<double> grad;
  };
  for (const Want& want :
       {Want{0.0, 4.028687542884579,
             {0.0119824820526, 0.0956848369227, -0.12120105793, 0.0135337389546, -0.103290806438, 0.00244129201783,
              0.00737796070907, 0.0934715537113, 0.309723171017, 0.312958350326, 0.0407813291039, -0.663462850448}},
        Want{0.1, 3.816889410439352,
             {0.00935448530045, 0.0968808973842, -0.103271626709, -0.00296375597515, -0.0939799350207,
              0.00274645352006, 0.00274465024214, 0.0884888312585, 0.287587695051, 0.293398453431, 0.0326769404794,
              -0.613663088961}}}) {
    SCOPED_TRACE("e " + std::to_string(want.e));
    Tensor z = kiln::testing::wave_tensor({3, 4}, DType::f64, 0.9, 0.2, 3.0).set_requires_grad(true);
    Tensor loss = ops::cross_entropy(z, y, want.e, w);
    EXPECT_NEAR(loss.item(), want.loss, 1e-12);
    loss.backward();
    expect_close(z.grad(), want.grad, 1e-11, 0, "dlogits");
  }
}

TEST(WeightedCrossEntropy, WeightsOfOneAndScaledWeightsGiveTheUnweightedLoss) {
  // The weighted mean is invariant to scaling w; with w = c the loss and gradient are the plain mean's.
  Tensor y = Tensor::from_vector(std::vector<int64_t>{1, 0, 5, 2}, {4});
  for (double e : {0.0, 0.2}) {
    Tensor z0 = randn({4, 6}, 82, DType::f64, 2.0).set_requires_grad(true);
    Tensor l0 = ops::cross_entropy(z0, y, e);
    l0.backward();
    Tensor z1 = z0.detach().clone().set_requires_grad(true);
    Tensor l1 = ops::cross_entropy(z1, y, e, Tensor::full({6}, 2.5, DType::f64));
    l1.backward();
    EXPECT_NEAR(l1.item(), l0.item(), 1e-12);
    expect_close(z1.grad(), z0.grad().to_double_vector(), 1e-12, 1e-12, "dlogits");
  }
}

TEST(WeightedCrossEntropy, ABatchOfZeroWeightGivesZero) {
  // NOTE: PyTorch gives NaN (0/0) here; a training step on such a batch must not abort the run.
  Tensor z = randn({3, 4}, 83, DType::f64).set_requires_grad(true);
  Tensor y = Tensor::from_vector(std::vector<int64_t>{1, 1, 3}, {3});
  Tensor w = Tensor::from_vector(std::vector<double>{1.0, 0.0, 2.0, 0.0}, {4}, DType::f64);
  Tensor loss = ops::cross_entropy(z, y, 0.1, w);
  EXPECT_EQ(loss.item(), 0.0);
  loss.backward();
  expect_close(z.grad(), std::vector<double>(12, 0.0), 0, 0, "dlogits");
}

TEST(WeightedCrossEntropy, ErrorsNameTheWeights) {
  using kiln::testing::expect_error;
  Tensor z = Tensor::zeros({2, 3});
  Tensor y = Tensor::zeros({2}, DType::i64);
  expect_error([&] { ops::cross_entropy(z, y, 0.0, Tensor::ones({4})); }, {"class_weights", "f32[4]", "[3]"});
  expect_error([&] { ops::cross_entropy(z, y, 0.0, Tensor::from_vector(std::vector<double>{1, -1, 1}, {3})); },
               {"class_weights[1]", "-1", ">= 0"});
  expect_error([&] { ops::cross_entropy(z, y, 0.0, Tensor::from_vector(std::vector<double>{1, NAN, 1}, {3})); },
               {"class_weights[1]", "finite"});
  expect_error([&] { ops::cross_entropy(z, y, 0.0, Tensor::ones({3}, DType::i64)); }, {"class_weights"});
}
