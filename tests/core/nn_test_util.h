// Helpers for the nn op tests (batch_norm, pool, lrn, dropout, loss): the deterministic inputs the
// PyTorch fixtures were generated from, and an error-message check.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"

namespace kiln::testing {

// v[i] = s * sin(a*i + b): the inputs of the PyTorch fixtures, in the flat (NHWC) order. The same
// formula in the generating Python snippets is `math.sin(a*i+b)*s`.
inline std::vector<double> wave(int64_t n, double a = 0.7, double b = 0.3, double s = 1.5) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = s * std::sin(a * static_cast<double>(i) + b);
  return v;
}
inline Tensor wave_tensor(const Shape& shape, DType dtype = DType::f32, double a = 0.7, double b = 0.3,
                          double s = 1.5) {
  return Tensor::from_vector(wave(shape_numel(shape), a, b, s), shape, DType::f64).to(dtype);
}

// Expects f() to throw kiln::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected a kiln::Error containing '" << (parts.empty() ? "" : parts[0]) << "'";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

}  // namespace kiln::testing
