// Helpers for the optimizer tests: parameters and gradients from literal values.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "optim/param.h"

namespace kiln::testing {

inline ParamRef make_param(const std::string& name, const std::vector<float>& values, Shape shape = {},
                           bool no_decay = false) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  Tensor t = Tensor::from_vector(values, shape);
  t.set_requires_grad(true);
  return {name, t, no_decay};
}

inline void set_grad(const ParamRef& p, const std::vector<float>& values) {
  Tensor t = p.param;
  t.set_grad(Tensor::from_vector(values, p.param.shape()));
}

inline std::vector<float> values(const ParamRef& p) { return p.param.to_float_vector(); }

// Element-wise |a - b| <= tol * max(1, |b|).
inline void expect_close(const std::vector<float>& a, const std::vector<double>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], tol * std::max(1.0, std::abs(b[i]))) << what << " [" << i << "]";
}

// Deep copies of the parameters (fresh leaves, no grads), to run a second optimizer on equal values.
inline std::vector<ParamRef> copy_params(const std::vector<ParamRef>& params) {
  std::vector<ParamRef> out;
  for (const auto& p : params) {
    Tensor t = p.param.detach().clone();
    t.set_requires_grad(true);
    out.push_back({p.name, t, p.no_decay});
  }
  return out;
}

}  // namespace kiln::testing
