// local_response_norm: forward and backward against naive double-precision loops (the backward by
// the plain chain rule over every (output, input) channel pair), gradchecks for odd and even sizes,
// the sqrt fast paths (beta 0.75, 0.5) and the pow path, errors, and fixed cases against PyTorch.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/ops/lrn.h"
#include "tests/core/nn_test_util.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::randn;

namespace {

struct Ref {
  std::vector<double> y, dx;
};

Ref reference(const std::vector<double>& x, const std::vector<double>& dy, int64_t C, int64_t size, double alpha,
              double beta, double k) {
  Ref r;
  r.y.assign(x.size(), 0.0);
  r.dx.assign(x.size(), 0.0);
  int64_t rows = static_cast<int64_t>(x.size()) / C;
  for (int64_t p = 0; p < rows; ++p) {
    const double* xr = x.data() + p * C;
    for (int64_t c = 0; c < C; ++c) {
      int64_t lo = std::max<int64_t>(0, c - size / 2), hi = std::min<int64_t>(C - 1, c + (size - 1) / 2);
      double s = 0;
      for (int64_t j = lo; j <= hi; ++j) s += xr[j] * xr[j];
      double d = k + alpha / size * s;
      r.y[p * C + c] = xr[c] * std::pow(d, -beta);
      // dy_c/dx_j: the direct term for j == c, and through d for every j in the window.
      double g = dy[p * C + c];
      r.dx[p * C + c] += g * std::pow(d, -beta);
      for (int64_t j = lo; j <= hi; ++j)
        r.dx[p * C + j] += g * xr[c] * -beta * std::pow(d, -beta - 1) * alpha / size * 2 * xr[j];
    }
  }
  return r;
}

struct Case {
  Shape shape;
  int64_t size;
  double alpha, beta, k;
};

void check_case(const Case& cs, DType dtype, double tol) {
  SCOPED_TRACE(shape_str(cs.shape) + " size " + std::to_string(cs.size) + " beta " + std::to_string(cs.beta) + " " +
               dtype_name(dtype));
  Tensor x = randn(cs.shape, 50, dtype, 2.0).set_requires_grad(true);
  Tensor dy = randn(cs.shape, 51, dtype);
  Ref r = reference(x.to_double_vector(), dy.to_double_vector(), cs.shape.back(), cs.size, cs.alpha, cs.beta, cs.k);
  Tensor y = ops::local_response_norm(x, cs.size, cs.alpha, cs.beta, cs.k);
  EXPECT_EQ(y.shape(), cs.shape);
  expect_close(y, r.y, tol, tol, "y");
  y.backward(dy);
  expect_close(x.grad(), r.dx, tol, tol, "dx");
}

std::vector<Case> cases() {
  return {
      {{2, 3, 5, 7}, 5, 1e-4, 0.75, 1.0},     // AlexNet's parameters (which barely normalise)
      {{2, 3, 5, 7}, 5, 0.5, 0.75, 2.0},      // strong normalisation, same fast path
      {{1, 2, 3, 4}, 4, 0.3, 0.5, 1.0},       // even size, batch 1, beta 0.5 path
      {{3, 6}, 3, 0.2, 0.6, 0.5},             // (N, C), the general pow path
      {{2, 2, 2, 5}, 1, 0.4, 0.75, 1.0},      // size 1: each channel alone
      {{1, 3, 3, 3}, 9, 0.4, 0.9, 1.5},       // window wider than the channels
      {{4, 13, 13, 96}, 5, 1e-2, 0.75, 2.0},  // AlexNet-sized rows, threaded
  };
}

}  // namespace

TEST(Lrn, MatchesReference) {
  for (const Case& c : cases()) {
    check_case(c, DType::f64, 1e-12);
    check_case(c, DType::f32, 1e-5);
  }
}

TEST(Lrn, Gradcheck) {
  for (const Case& c : cases()) {
    if (shape_numel(c.shape) > 1000) continue;
    Tensor x = randn(c.shape, 52, DType::f64).set_requires_grad(true);
    kiln::testing::gradcheck(
        [c](const std::vector<Tensor>& in) { return ops::local_response_norm(in[0], c.size, c.alpha, c.beta, c.k); },
        {x}, "lrn " + shape_str(c.shape) + " size " + std::to_string(c.size));
  }
  Tensor xf = randn({2, 2, 3, 6}, 53).set_requires_grad(true);
  kiln::testing::gradcheck(
      [](const std::vector<Tensor>& in) { return ops::local_response_norm(in[0], 5, 0.5, 0.75, 2.0); }, {xf},
      "lrn f32");
}

TEST(Lrn, Bf16ComputesInF32) {
  Tensor x = randn({2, 3, 3, 8}, 54).to(DType::bf16).set_requires_grad(true);
  Tensor y = ops::local_response_norm(x, 5, 0.5, 0.75, 2.0);
  EXPECT_EQ(y.dtype(), DType::bf16);
  Tensor want = ops::local_response_norm(x.detach().to(DType::f32), 5, 0.5, 0.75, 2.0);
  expect_close(y, want.to_double_vector(), 1e-2, 1e-2, "bf16 y");
  y.backward(Tensor::ones(y.shape(), DType::bf16));
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
}

TEST(Lrn, ErrorsNameOpAndShapes) {
  using kiln::testing::expect_error;
  expect_error([] { ops::local_response_norm(Tensor::zeros({2, 3, 3, 4}), 0); },
               {"local_response_norm", "size", "0", "f32[2, 3, 3, 4]"});
  expect_error([] { ops::local_response_norm(Tensor::zeros({4}), 3); }, {"local_response_norm", "f32[4]"});
  expect_error([] { ops::local_response_norm(Tensor::zeros({2, 4}, DType::u8), 3); },
               {"local_response_norm", "floating", "u8[2, 4]"});
}

TEST(Lrn, MatchesPyTorch) {
  // Generated once with torch 1.13 (/usr/bin/python3):
  //   f = lambda n, a=0.7, b=0.3, s=1.5: torch.tensor([math.sin(a*i+b)*s for i in range(n)], dtype=torch.float64)
  //   x = f(56).reshape(2,2,2,7).permute(0,3,1,2).requires_grad_()
  //   y = F.local_response_norm(x, size, alpha, beta, k)
  //   dy = f(56, 0.3, 1.1, 1.0).reshape(2,2,2,7).permute(0,3,1,2); (y*dy).sum().backward()
  //   values at NHWC flat indices 0, 3, 6, 20, 55 of y and x.grad
  struct Want {
    int64_t size;
    double alpha, beta, k;
    std::vector<double> y, dx;
  };
  const std::vector<int> idx{0, 3, 6, 20, 55};
  for (const Want& w : {Want{5, 1e-2, 0.75, 2.0,
                             {0.262787625001, 0.599896097138, -0.869910211854, 0.877415101916, 0.793846730494},
                             {0.527109279134, 0.535503259962, 0.140929019442, 0.429735184813, -0.561504402508}},
                        Want{4, 0.5, 0.6, 1.0,
                             {0.392709853155, 0.762928234945, -1.211514925052, 1.155157799082, 1.147475629463},
                             {0.682357055091, 0.550072544005, 0.097069731042, 0.374938204779, -0.58283713379}}}) {
    SCOPED_TRACE("size " + std::to_string(w.size));
    Tensor x = kiln::testing::wave_tensor({2, 2, 2, 7}, DType::f64).set_requires_grad(true);
    Tensor y = ops::local_response_norm(x, w.size, w.alpha, w.beta, w.k);
    y.backward(kiln::testing::wave_tensor({2, 2, 2, 7}, DType::f64, 0.3, 1.1, 1.0));
    std::vector<double> yv = y.to_double_vector(), dx = x.grad().to_double_vector();
    for (size_t i = 0; i < idx.size(); ++i) {
      EXPECT_NEAR(yv[idx[i]], w.y[i], 1e-11) << "y[" << idx[i] << "]";
      EXPECT_NEAR(dx[idx[i]], w.dx[i], 1e-11) << "dx[" << idx[i] << "]";
    }
  }
}
