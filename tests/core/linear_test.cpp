// matmul and linear (core/ops/linear.cpp, core/cpu/linear.cpp): forward and gradients against double-precision loops,
// transposed and sliced operands (passed to oneDNN by strides), finite differences, bf16/f16 against
// f32, and the error messages.
#include "core/ops/linear.h"

#include <gtest/gtest.h>

#include "core/autograd.h"
#include "tests/expect_error.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::expect_error;
using kiln::testing::randn;

namespace {

// (m, k) @ (k, n) in double, with a and b given row-major.
std::vector<double> ref_mm(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
                           int64_t n) {
  std::vector<double> y(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < k; ++q) s += a[i * k + q] * b[q * n + j];
      y[i * n + j] = s;
    }
  return y;
}

std::vector<double> ref_t(const std::vector<double>& a, int64_t r, int64_t c) {
  std::vector<double> t(a.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[j * r + i] = a[i * c + j];
  return t;
}

struct Dims {
  int64_t m, k, n;
};
const std::vector<Dims> kShapes = {{1, 1, 1},  {3, 5, 7},    {17, 33, 9},  {64, 1, 32},
                                   {1, 64, 1}, {31, 40, 65}, {128, 96, 80}};

double tol(int64_t k) { return 2e-5 * static_cast<double>(k + 1); }

}  // namespace

TEST(Matmul, ForwardAndGradientsMatchReference) {
  for (const Dims& d : kShapes) {
    SCOPED_TRACE(::testing::Message() << d.m << "x" << d.k << "x" << d.n);
    Tensor a = randn({d.m, d.k}, 1).set_requires_grad(true);
    Tensor b = randn({d.k, d.n}, 2).set_requires_grad(true);
    Tensor y = ops::matmul(a, b);
    ASSERT_EQ(y.shape(), (Shape{d.m, d.n}));
    auto av = a.to_double_vector(), bv = b.to_double_vector();
    expect_close(y, ref_mm(av, bv, d.m, d.k, d.n), tol(d.k), 1e-5, "y");
    Tensor gy = randn({d.m, d.n}, 3);
    y.backward(gy);
    auto gv = gy.to_double_vector();
    expect_close(a.grad(), ref_mm(gv, ref_t(bv, d.k, d.n), d.m, d.n, d.k), tol(d.n), 1e-5, "da = gy b^T");
    expect_close(b.grad(), ref_mm(ref_t(av, d.m, d.k), gv, d.k, d.m, d.n), tol(d.m), 1e-5, "db = a^T gy");
  }
}

TEST(Matmul, TransposedAndSlicedOperands) {
  // Column-major views (transposes) and row-major views with a longer leading dimension (slices)
  // go to oneDNN by strides; a broadcast (stride 0) view is packed first. All give the dense result.
  const int64_t m = 13, k = 21, n = 11;
  Tensor at = randn({k, m}, 4), bt = randn({n, k}, 5);
  Tensor a_view = at.transpose(0, 1), b_view = bt.transpose(0, 1);
  Tensor a_wide = randn({m, k + 7}, 6), b_wide = randn({k, n + 5}, 7);
  Tensor a_slice = a_wide.slice(1, 3, 3 + k), b_slice = b_wide.slice(1, 2, 2 + n);
  Tensor a_bcast = make_view(randn({1, k}, 8), {m, k}, {0, 1}, 0);
  std::vector<std::pair<Tensor, Tensor>> pairs = {
      {a_view, b_view}, {a_slice, b_slice}, {a_view, b_slice}, {a_slice, b_view}, {a_bcast, b_view}};
  for (size_t i = 0; i < pairs.size(); ++i) {
    SCOPED_TRACE(i);
    auto [a, b] = pairs[i];
    Tensor y = ops::matmul(a, b);
    expect_close(y, ref_mm(a.to_double_vector(), b.to_double_vector(), m, k, n), tol(k), 1e-5, "y");
  }
  // Row and column vectors whose unit dims carry odd strides.
  Tensor col = randn({k, 5}, 9).slice(1, 2, 3);   // (k, 1), stride 5
  Tensor row = randn({5, m}, 10).slice(0, 1, 2);  // (1, m)
  expect_close(ops::matmul(row.transpose(0, 1), col.transpose(0, 1)),
               ref_mm(ref_t(row.to_double_vector(), 1, m), col.to_double_vector(), m, 1, k), 1e-5, 1e-5, "outer");
}

TEST(Linear, ForwardAndGradientsMatchReference) {
  for (const Dims& d : kShapes) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "N=" << d.m << " in=" << d.k << " out=" << d.n << " bias=" << bias);
      Tensor x = randn({d.m, d.k}, 11).set_requires_grad(true);
      Tensor w = randn({d.n, d.k}, 12).set_requires_grad(true);
      Tensor b = bias ? randn({d.n}, 13).set_requires_grad(true) : Tensor();
      Tensor y = ops::linear(x, w, b);
      ASSERT_EQ(y.shape(), (Shape{d.m, d.n}));
      auto xv = x.to_double_vector(), wv = w.to_double_vector();
      std::vector<double> want = ref_mm(xv, ref_t(wv, d.n, d.k), d.m, d.k, d.n);
      if (bias) {
        auto bv = b.to_double_vector();
        for (int64_t i = 0; i < d.m; ++i)
          for (int64_t j = 0; j < d.n; ++j) want[i * d.n + j] += bv[j];
      }
      expect_close(y, want, tol(d.k), 1e-5, "y");
      Tensor gy = randn({d.m, d.n}, 14);
      y.backward(gy);
      auto gv = gy.to_double_vector();
      expect_close(x.grad(), ref_mm(gv, wv, d.m, d.n, d.k), tol(d.n), 1e-5, "dx = gy w");
      expect_close(w.grad(), ref_mm(ref_t(gv, d.m, d.n), xv, d.n, d.m, d.k), tol(d.m), 1e-5, "dw = gy^T x");
      if (bias) {
        std::vector<double> gb(d.n, 0.0);
        for (int64_t i = 0; i < d.m; ++i)
          for (int64_t j = 0; j < d.n; ++j) gb[j] += gv[i * d.n + j];
        expect_close(b.grad(), gb, tol(d.m), 1e-5, "db");
      }
    }
  }
}

TEST(Linear, FrozenWeightGivesOnlyInputGradient) {
  Tensor x = randn({4, 6}, 15).set_requires_grad(true);
  Tensor w = randn({3, 6}, 16), b = randn({3}, 17);
  ops::linear(x, w, b).backward(Tensor::ones({4, 3}));
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  NoGradGuard ng;
  EXPECT_EQ(ops::linear(x, w, b).grad_fn(), nullptr);
}

TEST(Linear, Gradcheck) {
  for (const Dims& d : std::vector<Dims>{{1, 3, 2}, {5, 7, 4}, {6, 1, 3}}) {
    SCOPED_TRACE(::testing::Message() << d.m << "x" << d.k << "x" << d.n);
    std::vector<Tensor> in{randn({d.m, d.k}, 20).set_requires_grad(true), randn({d.n, d.k}, 21).set_requires_grad(true),
                           randn({d.n}, 22).set_requires_grad(true)};
    kiln::testing::gradcheck([](const std::vector<Tensor>& v) { return ops::linear(v[0], v[1], v[2]); }, in, "linear");
    std::vector<Tensor> mm{randn({d.m, d.k}, 23).set_requires_grad(true),
                           randn({d.k, d.n}, 24).set_requires_grad(true)};
    kiln::testing::gradcheck([](const std::vector<Tensor>& v) { return ops::matmul(v[0], v[1]); }, mm, "matmul");
    // Through a transposed operand (a strided view in forward and backward).
    std::vector<Tensor> tr{randn({d.k, d.m}, 25).set_requires_grad(true),
                           randn({d.k, d.n}, 26).set_requires_grad(true)};
    kiln::testing::gradcheck([](const std::vector<Tensor>& v) { return ops::matmul(v[0].transpose(0, 1), v[1]); }, tr,
                             "matmul(a^T, b)");
  }
}

TEST(Linear, LowPrecisionMatchesF32) {
  // Same rounded inputs in f32 and in the low precision: the results differ by the final rounding
  // (2^-9 relative for bf16, 2^-12 for f16) plus accumulation order; gradients likewise.
  for (DType t : {DType::bf16, DType::f16}) {
    double rel = t == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
    SCOPED_TRACE(dtype_name(t));
    Tensor x = randn({37, 50}, 30, t).set_requires_grad(true), w = randn({19, 50}, 31, t).set_requires_grad(true);
    Tensor b = randn({19}, 32, t).set_requires_grad(true);
    Tensor xf = x.detach().to(DType::f32).set_requires_grad(true),
           wf = w.detach().to(DType::f32).set_requires_grad(true);
    Tensor bf = b.detach().to(DType::f32).set_requires_grad(true);
    Tensor y = ops::linear(x, w, b), yf = ops::linear(xf, wf, bf);
    EXPECT_EQ(y.dtype(), t);
    expect_close(y, yf.to_double_vector(), rel, rel, "y");
    Tensor gy = randn({37, 19}, 33, t);
    y.backward(gy);
    yf.backward(gy.to(DType::f32));
    EXPECT_EQ(x.grad().dtype(), t);
    EXPECT_EQ(w.grad().dtype(), t);
    expect_close(x.grad(), xf.grad().to_double_vector(), rel, rel, "dx");
    expect_close(w.grad(), wf.grad().to_double_vector(), 4 * rel, rel, "dw");
    expect_close(b.grad(), bf.grad().to_double_vector(), 4 * rel, rel, "db");
    Tensor a = randn({9, 20}, 34, t), m = randn({20, 7}, 35, t);
    expect_close(ops::matmul(a, m), ops::matmul(a.to(DType::f32), m.to(DType::f32)).to_double_vector(), rel, rel,
                 "matmul");
    // An f32 seed gradient for a low-precision output is converted, and gradients keep the input dtype.
    a.set_requires_grad(true);
    ops::matmul(a, m).backward(Tensor::ones({9, 7}));
    EXPECT_EQ(a.grad().dtype(), t);
    expect_close(a.grad(), ops::matmul(Tensor::ones({9, 7}), m.to(DType::f32).transpose(0, 1)).to_double_vector(), rel,
                 rel, "matmul da from an f32 seed");
  }
}

TEST(Linear, ErrorsNameTheOpAndShapes) {
  Tensor a = randn({3, 4}, 1), b = randn({5, 6}, 2);
  expect_error([&] { ops::matmul(a, b); }, {"matmul", "f32[3, 4]", "f32[5, 6]", "inner"});
  expect_error([&] { ops::matmul(a, randn({4, 2}, 3).to(DType::bf16)); }, {"matmul", "bf16[4, 2]", "dtype"});
  expect_error([&] { ops::matmul(randn({2, 3, 4}, 4), randn({4, 2}, 5)); }, {"matmul", "f32[2, 3, 4]", "2-D"});
  expect_error([&] { ops::matmul(a.to(DType::f64), randn({4, 2}, 6).to(DType::f64)); }, {"matmul", "f64", "accepted"});
  expect_error([&] { ops::linear(a, randn({2, 5}, 7), Tensor()); }, {"linear", "f32[3, 4]", "f32[2, 5]", "features"});
  expect_error([&] { ops::linear(a, randn({2, 4}, 8), randn({3}, 9)); }, {"linear", "bias", "f32[3]", "[2]"});
  expect_error([&] { ops::linear(a, randn({2, 4}, 10).to(DType::bf16), Tensor()); }, {"linear", "bf16[2, 4]", "dtype"});
  expect_error([&] { ops::linear(randn({4}, 11), randn({2, 4}, 12), Tensor()); }, {"linear", "f32[4]", "2-D"});
}
