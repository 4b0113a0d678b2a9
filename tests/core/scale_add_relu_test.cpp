// ops::scale_add_relu on the CPU (core/ops/scale_add_relu.h): the fused f32 kernel's values and
// gradients against a double-precision reference written here, its parts (the f64 path) giving the
// same, NaN's rule, finite differences, and the errors for shapes that do not fit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/ops/scale_add_relu.h"
#include "tests/expect_error.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::expect_error;
using kiln::testing::randn;

namespace {

struct Reference {
  std::vector<double> y, dx, dscale, dresidual;
};

// y = max(0, x * s[n, c] + r) and its gradients for the upstream gradient g, in double.
Reference reference(const Tensor& x, const Tensor& s, const Tensor& r, const Tensor& g) {
  const auto xv = x.to_double_vector(), sv = s.to_double_vector(), rv = r.to_double_vector(), gv = g.to_double_vector();
  const int64_t n = x.size(0), pixels = x.size(1) * x.size(2), c = x.size(3);
  Reference ref{std::vector<double>(xv.size()), std::vector<double>(xv.size()), std::vector<double>(sv.size(), 0.0),
                std::vector<double>(xv.size())};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t k = 0; k < c; ++k) {
        const size_t e = static_cast<size_t>((i * pixels + p) * c + k), sc = static_cast<size_t>(i * c + k);
        const double v = xv[e] * sv[sc] + rv[e];
        ref.y[e] = std::max(0.0, v);
        const double m = v > 0 ? gv[e] : 0.0;
        ref.dresidual[e] = m;
        ref.dx[e] = m * sv[sc];
        ref.dscale[sc] += m * xv[e];
      }
  return ref;
}

}  // namespace

TEST(ScaleAddRelu, FusedKernelMatchesTheReference) {
  for (const Shape& shape : {Shape{2, 5, 3, 4}, Shape{1, 1, 1, 1}, Shape{3, 7, 7, 17}, Shape{16, 14, 14, 32}}) {
    Tensor x = randn(shape, 1).set_requires_grad(true);
    Tensor s = randn({shape[0], shape[3]}, 2).set_requires_grad(true);
    Tensor r = randn(shape, 3).set_requires_grad(true);
    Tensor g = randn(shape, 4);
    const Reference ref = reference(x, s, r, g);
    Tensor y = ops::scale_add_relu(x, s, r);
    expect_close(y, ref.y, 1e-6, 1e-6, "forward " + shape_str(shape));
    y.backward(g);
    expect_close(x.grad(), ref.dx, 1e-6, 1e-6, "dx " + shape_str(shape));
    expect_close(r.grad(), ref.dresidual, 1e-6, 1e-6, "dresidual " + shape_str(shape));
    expect_close(s.grad(), ref.dscale, 1e-5, 1e-5, "dscale " + shape_str(shape));
  }
}

// f64 takes the op's parts (mul, add, relu); the f32 fused kernel gives the same values and gradients.
TEST(ScaleAddRelu, PartsAndFusedKernelAgree) {
  const Shape shape{3, 4, 5, 6};
  Tensor x = randn(shape, 5, DType::f64).set_requires_grad(true);
  Tensor s = randn({3, 6}, 6, DType::f64).set_requires_grad(true);
  Tensor r = randn(shape, 7, DType::f64).set_requires_grad(true);
  Tensor g = randn(shape, 8, DType::f64);
  Tensor y = ops::scale_add_relu(x, s, r);
  y.backward(g);
  const Reference ref = reference(x, s, r, g);
  expect_close(y, ref.y, 1e-12, 1e-12, "f64 forward");
  expect_close(s.grad(), ref.dscale, 1e-12, 1e-12, "f64 dscale");
  Tensor x32 = x.detach().to(DType::f32).set_requires_grad(true), s32 = s.detach().to(DType::f32).set_requires_grad(true);
  Tensor r32 = r.detach().to(DType::f32).set_requires_grad(true);
  Tensor y32 = ops::scale_add_relu(x32, s32, r32);
  y32.backward(g.to(DType::f32));
  expect_close(y32, y.to_double_vector(), 1e-6, 1e-6, "f32 against f64 forward");
  expect_close(x32.grad(), x.grad().to_double_vector(), 1e-6, 1e-6, "f32 against f64 dx");
  expect_close(s32.grad(), s.grad().to_double_vector(), 1e-5, 1e-5, "f32 against f64 dscale");
}

TEST(ScaleAddRelu, GradientsMatchFiniteDifferences) {
  kiln::testing::gradcheck(
      [](const std::vector<Tensor>& v) { return ops::scale_add_relu(v[0], v[1], v[2]); },
      {randn({2, 3, 2, 5}, 9).set_requires_grad(true), randn({2, 5}, 10).set_requires_grad(true),
       randn({2, 3, 2, 5}, 11).set_requires_grad(true)},
      "scale_add_relu");
}

// relu's rule: NaN stays NaN forward and passes its gradient.
TEST(ScaleAddRelu, NanPropagatesAsRelu) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector(std::vector<float>{nan, -1.0f, 2.0f}, {1, 1, 3, 1}).set_requires_grad(true);
  Tensor s = Tensor::from_vector(std::vector<float>{2.0f}, {1, 1}).set_requires_grad(true);
  Tensor r = Tensor::from_vector(std::vector<float>{0.0f, 1.0f, 1.0f}, {1, 1, 3, 1}).set_requires_grad(true);
  Tensor y = ops::scale_add_relu(x, s, r);
  const auto yv = y.to_double_vector();
  EXPECT_TRUE(std::isnan(yv[0]));
  EXPECT_EQ(yv[1], 0.0);  // -1 * 2 + 1 < 0
  EXPECT_EQ(yv[2], 5.0);
  y.backward(Tensor::ones({1, 1, 3, 1}));
  EXPECT_EQ(r.grad().to_double_vector(), (std::vector<double>{1.0, 0.0, 1.0}));
}

TEST(ScaleAddRelu, ShapesThatDoNotFitAreRefused) {
  Tensor x = randn({2, 3, 3, 4}, 12);
  expect_error([&] { ops::scale_add_relu(x, randn({2, 3}, 13), x); }, {"scale_add_relu: x ", "scale (N, C)"});
  expect_error([&] { ops::scale_add_relu(x, randn({2, 4}, 13), randn({2, 3, 3, 5}, 14)); }, {"scale_add_relu", "of one shape"});
  expect_error([&] { ops::scale_add_relu(x, randn({2, 4}, 13, DType::f64), x); }, {"scale_add_relu", "differ in dtype"});
}
