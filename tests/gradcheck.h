// Test helpers shared by every test folder: finite-difference gradient checks and tensor compares.
//
// gradcheck(f, inputs): L = sum_i f(inputs)_i * r_i with fixed random r (so every output element
// matters); compares dL/dx from backward with central differences for every element of every input
// that requires grad. f64 inputs: eps 1e-6, tolerance 1e-6 relative; f32 inputs (oneDNN ops have no
// f64): eps 1e-2 on values of order 1 and a 2e-2 tolerance, with L summed in double.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace kiln::testing {

inline Tensor randn(const Shape& s, uint64_t seed, DType t = DType::f32, double std = 1.0) {
  Generator g(seed);
  return rand_normal(s, 0.0, std, t, Device::cpu(), &g);
}

inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                         double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = atol + rtol * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want[i] << " (tol " << tol
                      << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

inline void expect_close(const Tensor& got, const std::vector<double>& want, double atol, double rtol,
                         const std::string& what) {
  expect_close(got.to_double_vector(), want, atol, rtol, what);
}

using TestFn = std::function<Tensor(const std::vector<Tensor>&)>;

inline void gradcheck(const TestFn& f, std::vector<Tensor> inputs, const std::string& what, double atol = -1,
                      double rtol = -1) {
  bool f64 = inputs[0].dtype() == DType::f64;
  double eps = f64 ? 1e-6 : 1e-2;
  if (atol < 0) atol = f64 ? 1e-6 : 2e-2;
  if (rtol < 0) rtol = f64 ? 1e-5 : 2e-2;
  Tensor out0;
  {
    NoGradGuard ng;
    out0 = f(inputs);
  }
  std::vector<double> r = randn(out0.shape(), 12345, DType::f64).to_double_vector();
  auto loss = [&](const std::vector<Tensor>& xs) {
    NoGradGuard ng;
    std::vector<double> y = f(xs).to_double_vector();
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
    return s;
  };
  for (Tensor& x : inputs) x.zero_grad();
  Tensor out = f(inputs);
  out.backward(Tensor::from_vector(r, out.shape(), DType::f64).to(out.dtype()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    ASSERT_TRUE(x.grad().defined()) << what << ": input " << k << " got no gradient";
    std::vector<double> analytic = x.grad().to_double_vector();
    std::vector<double> numeric(analytic.size());
    std::vector<double> vals = x.to_double_vector();
    for (size_t i = 0; i < vals.size(); ++i) {
      std::vector<double> v = vals;
      v[i] = vals[i] + eps;
      Tensor xp = Tensor::from_vector(v, x.shape(), DType::f64).to(x.dtype());
      v[i] = vals[i] - eps;
      Tensor xm = Tensor::from_vector(v, x.shape(), DType::f64).to(x.dtype());
      // Use the actually representable step (f32 rounding of x +- eps).
      double hp = xp.to_double_vector()[i] - vals[i], hm = vals[i] - xm.to_double_vector()[i];
      auto xs = inputs;
      xs[k] = xp;
      double lp = loss(xs);
      xs[k] = xm;
      double lm = loss(xs);
      numeric[i] = (lp - lm) / (hp + hm);
    }
    expect_close(analytic, numeric, atol, rtol, what + ": d/d input " + std::to_string(k));
  }
}

}  // namespace kiln::testing
