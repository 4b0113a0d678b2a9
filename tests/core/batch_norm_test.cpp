// batch_norm: forward, backward, running statistics and eval mode against a naive double-precision
// reference (the textbook chain rule, not the fused formula the kernel uses), gradchecks, bf16,
// errors, and one case against PyTorch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/autograd.h"
#include "core/ops/batch_norm.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "tests/core/nn_test_util.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::randn;

namespace {

struct Ref {
  std::vector<double> y, mean, var;  // var biased
  std::vector<double> dx, dgamma, dbeta;
};

// x: M rows of C channels. training: batch statistics; eval: rm/rv.
Ref reference(const std::vector<double>& x, const std::vector<double>& dy, int64_t C, const std::vector<double>& g,
              const std::vector<double>& b, bool training, const std::vector<double>& rm, const std::vector<double>& rv,
              double eps) {
  int64_t M = static_cast<int64_t>(x.size()) / C;
  Ref r;
  r.mean.assign(C, 0);
  r.var.assign(C, 0);
  if (training) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t c = 0; c < C; ++c) r.mean[c] += x[i * C + c] / M;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t c = 0; c < C; ++c) r.var[c] += (x[i * C + c] - r.mean[c]) * (x[i * C + c] - r.mean[c]) / M;
  } else {
    r.mean = rm;
    r.var = rv;
  }
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dgamma.assign(C, 0);
  r.dbeta.assign(C, 0);
  for (int64_t c = 0; c < C; ++c) {
    double sd = std::sqrt(r.var[c] + eps);
    double dvar = 0, dmean = 0;
    for (int64_t i = 0; i < M; ++i) {
      double xh = (x[i * C + c] - r.mean[c]) / sd;
      r.y[i * C + c] = g[c] * xh + b[c];
      r.dgamma[c] += dy[i * C + c] * xh;
      r.dbeta[c] += dy[i * C + c];
      double dxh = dy[i * C + c] * g[c];
      dvar += dxh * (x[i * C + c] - r.mean[c]) * -0.5 * std::pow(r.var[c] + eps, -1.5);
      dmean += -dxh / sd;
    }
    for (int64_t i = 0; i < M; ++i) dmean += dvar * -2.0 * (x[i * C + c] - r.mean[c]) / M;
    for (int64_t i = 0; i < M; ++i) {
      r.dx[i * C + c] = dy[i * C + c] * g[c] / sd;
      if (training) r.dx[i * C + c] += dvar * 2.0 * (x[i * C + c] - r.mean[c]) / M + dmean / M;
    }
  }
  return r;
}

struct Case {
  Shape shape;
  DType dtype;
  bool training;
};

void check_case(const Case& cs, double tol) {
  SCOPED_TRACE(shape_str(cs.shape) + (cs.training ? " training " : " eval ") + dtype_name(cs.dtype));
  int64_t C = cs.shape.back();
  Tensor x = ops::add_scalar(randn(cs.shape, 1, cs.dtype, 2.0), 0.5).set_requires_grad(true);
  Tensor g = ops::add_scalar(randn({C}, 2, cs.dtype, 0.5), 1.0).set_requires_grad(true);
  Tensor b = randn({C}, 3, cs.dtype).set_requires_grad(true);
  std::vector<double> rm0 = randn({C}, 4, DType::f64, 0.3).to_double_vector();
  std::vector<double> rv0 = ops::add_scalar(ops::square(randn({C}, 5, DType::f64)), 0.2).to_double_vector();
  DType st = cs.dtype == DType::f64 ? DType::f64 : DType::f32;  // running stats stay f32 for f32 models
  Tensor rm = Tensor::from_vector(rm0, {C}, st), rv = Tensor::from_vector(rv0, {C}, st);
  Tensor dy = randn(cs.shape, 6, cs.dtype);
  const double momentum = 0.3, eps = 1e-5;
  Ref r = reference(x.to_double_vector(), dy.to_double_vector(), C, g.to_double_vector(), b.to_double_vector(),
                    cs.training, rm0, rv0, eps);
  Tensor y = ops::batch_norm(x, g, b, rm, rv, cs.training, momentum, eps);
  EXPECT_EQ(y.shape(), cs.shape);
  EXPECT_EQ(y.dtype(), cs.dtype);
  expect_close(y, r.y, tol, tol, "y");
  y.backward(dy);
  expect_close(x.grad(), r.dx, tol, tol, "dx");
  expect_close(g.grad(), r.dgamma, tol * 10, tol, "dgamma");
  expect_close(b.grad(), r.dbeta, tol * 10, tol, "dbeta");
  // Running statistics: unchanged in eval; momentum update with the unbiased variance in training.
  int64_t M = x.numel() / C;
  std::vector<double> want_m = rm0, want_v = rv0;
  if (cs.training)
    for (int64_t c = 0; c < C; ++c) {
      want_m[c] = (1 - momentum) * rm0[c] + momentum * r.mean[c];
      want_v[c] = (1 - momentum) * rv0[c] + momentum * r.var[c] * M / (M - 1);
    }
  expect_close(rm, want_m, 1e-5, 1e-5, "running_mean");
  expect_close(rv, want_v, 1e-5, 1e-5, "running_var");
}

}  // namespace

TEST(BatchNorm, MatchesReferenceTraining) {
  check_case({{2, 3, 5, 7}, DType::f32, true}, 1e-4);
  check_case({{1, 5, 3, 4}, DType::f64, true}, 1e-10);  // batch 1
  check_case({{6, 3}, DType::f32, true}, 1e-4);        // (N, C)
  check_case({{2, 1}, DType::f64, true}, 1e-10);       // the smallest batch: M = 2
  // Many rows (several accumulation blocks and threads) and an odd channel count.
  check_case({{4, 17, 19, 33}, DType::f32, true}, 2e-4);
  check_case({{40, 1000}, DType::f32, true}, 2e-4);  // few rows of many channels, threaded
}

TEST(BatchNorm, MatchesReferenceEval) {
  check_case({{2, 3, 5, 7}, DType::f32, false}, 1e-4);
  check_case({{1, 1, 1, 5}, DType::f64, false}, 1e-12);
  check_case({{9, 4}, DType::f32, false}, 1e-4);
}

TEST(BatchNorm, Gradcheck) {
  for (bool training : {true, false}) {
    for (Shape s : {Shape{2, 3, 2, 5}, Shape{1, 2, 3, 3}, Shape{5, 4}}) {
      int64_t C = s.back();
      Tensor x = randn(s, 7, DType::f64).set_requires_grad(true);
      Tensor g = ops::add_scalar(randn({C}, 8, DType::f64), 1.0).set_requires_grad(true);
      Tensor b = randn({C}, 9, DType::f64).set_requires_grad(true);
      Tensor rm = randn({C}, 10, DType::f64, 0.2), rv = Tensor::full({C}, 0.7, DType::f64);
      kiln::testing::gradcheck(
          [&](const std::vector<Tensor>& in) {
            // Fresh running stats each call: the update must not leak into the function.
            return ops::batch_norm(in[0], in[1], in[2], rm.clone(), rv.clone(), training, 0.1, 1e-5);
          },
          {x, g, b}, std::string("batch_norm ") + (training ? "training " : "eval ") + shape_str(s));
    }
  }
}

TEST(BatchNorm, GradcheckF32) {
  Tensor x = randn({2, 3, 3, 4}, 11).set_requires_grad(true);
  Tensor g = ops::add_scalar(randn({4}, 12), 1.0).set_requires_grad(true);
  Tensor b = randn({4}, 13).set_requires_grad(true);
  kiln::testing::gradcheck(
      [](const std::vector<Tensor>& in) { return ops::batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true); },
      {x, g, b}, "batch_norm f32", 5e-2, 5e-2);
}

TEST(BatchNorm, NoAffineAndNoRunningStats) {
  // gamma/beta undefined = 1/0; running stats undefined = batch stats only (track_running_stats off).
  Tensor x = randn({3, 2, 2, 5}, 14, DType::f64).set_requires_grad(true);
  Tensor y = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  std::vector<double> ones(5, 1.0), zeros(5, 0.0);
  Tensor dy = randn({3, 2, 2, 5}, 15, DType::f64);
  Ref r = reference(x.to_double_vector(), dy.to_double_vector(), 5, ones, zeros, true, zeros, ones, 1e-5);
  expect_close(y, r.y, 1e-12, 1e-12, "y");
  y.backward(dy);
  expect_close(x.grad(), r.dx, 1e-10, 1e-10, "dx");
}

TEST(BatchNorm, OnlyParametersNeedGrad) {
  // A first layer's input needs no gradient: dgamma/dbeta still match, x gets none.
  Tensor x = randn({2, 3, 3, 4}, 31, DType::f64);
  Tensor g = ops::add_scalar(randn({4}, 32, DType::f64), 1.0).set_requires_grad(true);
  Tensor b = randn({4}, 33, DType::f64).set_requires_grad(true);
  Tensor dy = randn({2, 3, 3, 4}, 34, DType::f64);
  Ref r = reference(x.to_double_vector(), dy.to_double_vector(), 4, g.to_double_vector(), b.to_double_vector(), true,
                    {}, {}, 1e-5);
  ops::batch_norm(x, g, b, Tensor(), Tensor(), true).backward(dy);
  EXPECT_FALSE(x.grad().defined());
  expect_close(g.grad(), r.dgamma, 1e-10, 1e-10, "dgamma");
  expect_close(b.grad(), r.dbeta, 1e-10, 1e-10, "dbeta");
}

TEST(BatchNorm, NonContiguousInput) {
  // (C, N) transposed to (N, C): the op packs it; the gradient reaches the (C, N) leaf.
  Tensor base = randn({5, 9}, 35, DType::f64).set_requires_grad(true);
  Tensor x = base.transpose(0, 1);
  ASSERT_FALSE(x.is_contiguous());
  Tensor dy = randn({9, 5}, 36, DType::f64);
  std::vector<double> ones(5, 1.0), zeros(5, 0.0);
  Ref r = reference(x.to_double_vector(), dy.to_double_vector(), 5, ones, zeros, true, zeros, ones, 1e-5);
  Tensor y = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  expect_close(y, r.y, 1e-12, 1e-12, "y");
  y.backward(dy);
  expect_close(base.grad().transpose(0, 1), r.dx, 1e-10, 1e-10, "dx");
}

TEST(BatchNorm, LargeMeanF32StaysAccurate) {
  // NOTE: |mean| / std = 1e4: a naive one-pass E[x^2] - E[x]^2 in f32 loses every digit here.
  Shape s{8, 16, 16, 8};
  Tensor x = ops::add_scalar(randn(s, 16, DType::f64, 0.1), 1000.0);
  std::vector<double> xv = x.to_double_vector(), ones(8, 1.0), zeros(8, 0.0);
  Ref r = reference(xv, xv, 8, ones, zeros, true, zeros, ones, 1e-5);
  Tensor y = ops::batch_norm(x.to(DType::f32), Tensor(), Tensor(), Tensor(), Tensor(), true);
  // f32 inputs near 1000 carry an absolute error of ~3e-5, i.e. 3e-4 standard deviations.
  expect_close(y, r.y, 2e-3, 0, "y");
}

// bf16 tensors are read and written in chunks of rows with f32 arithmetic: the result is exactly the f32
// op on the widened input, rounded once to bf16 (forward and dx; dgamma/dbeta are the f32 sums).
// Large enough for the threaded loops.
TEST(BatchNorm, Bf16ComputesInF32) {
  // 64 channels, and 24 channels over 1,615 rows: chunks of 170 rows, the last one partial
  for (Shape s : {Shape{4, 16, 16, 64}, Shape{5, 17, 19, 24}}) {
  SCOPED_TRACE(shape_str(s));
  const int64_t C = s.back();
  Tensor x32 = randn(s, 17), g = ops::add_scalar(randn({C}, 18), 1.0), b = randn({C}, 19);
  Tensor gy32 = randn(s, 20);
  Tensor x16 = x32.to(DType::bf16).set_requires_grad(true), gy16 = gy32.to(DType::bf16);
  Tensor xw = x16.detach().to(DType::f32).set_requires_grad(true);
  Tensor gw = g.detach().clone().set_requires_grad(true), bw = b.detach().clone().set_requires_grad(true);
  Tensor want = ops::batch_norm(xw, gw, bw, Tensor(), Tensor(), true);
  want.backward(gy16.to(DType::f32));
  g.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor y = ops::batch_norm(x16, g, b, Tensor(), Tensor(), true);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(y.to_double_vector(), want.to(DType::bf16).to_double_vector());
  y.backward(gy16);
  EXPECT_EQ(x16.grad().dtype(), DType::bf16);
  EXPECT_EQ(x16.grad().to_double_vector(), xw.grad().to(DType::bf16).to_double_vector());
  EXPECT_EQ(g.grad().to_double_vector(), gw.grad().to_double_vector());
  EXPECT_EQ(b.grad().to_double_vector(), bw.grad().to_double_vector());
  // Eval mode (running statistics) takes the same path.
  Tensor rm = randn({C}, 21), rv = ops::add_scalar(ops::square(randn({C}, 22)), 0.5);
  Tensor ye = ops::batch_norm(x16.detach(), g.detach(), b.detach(), rm, rv, false);
  Tensor we = ops::batch_norm(x16.detach().to(DType::f32), g.detach(), b.detach(), rm, rv, false);
  EXPECT_EQ(ye.to_double_vector(), we.to(DType::bf16).to_double_vector());
  }
}

TEST(BatchNorm, MomentumSequence) {
  // Three training steps: running = (1-m)*running + m*batch each time, from PyTorch's init (0, 1).
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  std::vector<double> m(3, 0.0), v(3, 1.0);
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({4, 3}, 20 + step, DType::f32, 1.0 + step);
    std::vector<double> xv = x.to_double_vector(), ones(3, 1.0), zeros(3, 0.0);
    Ref r = reference(xv, xv, 3, ones, zeros, true, zeros, ones, 1e-5);
    ops::batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1);
    for (int c = 0; c < 3; ++c) {
      m[c] = 0.9 * m[c] + 0.1 * r.mean[c];
      v[c] = 0.9 * v[c] + 0.1 * r.var[c] * 4.0 / 3.0;
    }
  }
  expect_close(rm, m, 1e-6, 1e-5, "running_mean");
  expect_close(rv, v, 1e-6, 1e-5, "running_var");
  // Eval mode leaves them alone.
  ops::batch_norm(randn({4, 3}, 30), Tensor(), Tensor(), rm, rv, false);
  expect_close(rm, m, 1e-6, 1e-5, "running_mean after eval");
}

TEST(BatchNorm, ErrorsNameOpAndShapes) {
  using kiln::testing::expect_error;
  Tensor x = Tensor::zeros({2, 3, 3, 4});
  expect_error([&] { ops::batch_norm(x, Tensor::ones({3}), Tensor(), Tensor(), Tensor(), true); },
               {"batch_norm", "gamma", "[4]", "f32[3]", "f32[2, 3, 3, 4]"});
  expect_error([&] { ops::batch_norm(x, Tensor(), Tensor(), Tensor::zeros({4}), Tensor(), true); },
               {"batch_norm", "running_mean and running_var"});
  expect_error([&] { ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false); },
               {"batch_norm", "eval", "f32[2, 3, 3, 4]"});
  expect_error([&] { ops::batch_norm(Tensor::zeros({1, 1, 1, 4}), Tensor(), Tensor(), Tensor(), Tensor(), true); },
               {"batch_norm", "more than one value per channel", "f32[1, 1, 1, 4]"});
  expect_error([&] { ops::batch_norm(Tensor::zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true); },
               {"batch_norm", "(N, C)", "f32[4]"});
  Tensor xi = Tensor::zeros({2, 4}, DType::i32);
  expect_error([&] { ops::batch_norm(xi, Tensor(), Tensor(), Tensor(), Tensor(), true); },
               {"batch_norm", "floating", "i32[2, 4]"});
}

TEST(BatchNorm, MatchesPyTorch) {
  // Generated once with torch 1.13 (/usr/bin/python3), NCHW view of the NHWC data:
  //   f = lambda n, a=0.7, b=0.3, s=1.5: torch.tensor([math.sin(a*i+b)*s for i in range(n)], dtype=torch.float64)
  //   x = f(36).reshape(2,2,3,3).permute(0,3,1,2).requires_grad_()
  //   g = (1 + 0.1*torch.arange(3.)).requires_grad_(); b = (0.2*torch.arange(3.) - 0.1).requires_grad_()
  //   rm = torch.tensor([0.5,-0.5,0.]); rv = torch.tensor([1.,2.,0.5])
  //   y = F.batch_norm(x, rm, rv, g, b, training=True, momentum=0.1, eps=1e-5)
  //   dy = f(36, 0.3, 1.1, 1.0).reshape(2,2,3,3).permute(0,3,1,2); (y*dy).sum().backward()
  //   (values below in NHWC flat order); then F.batch_norm(x, rm, rv, g, b, training=False)
  Tensor x = kiln::testing::wave_tensor({2, 2, 3, 3}, DType::f64).set_requires_grad(true);
  Tensor g = Tensor::from_vector(std::vector<double>{1.0, 1.1, 1.2}, {3}).set_requires_grad(true);
  Tensor b = Tensor::from_vector(std::vector<double>{-0.1, 0.1, 0.3}, {3}).set_requires_grad(true);
  Tensor rm = Tensor::from_vector(std::vector<double>{0.5, -0.5, 0.0}, {3});
  Tensor rv = Tensor::from_vector(std::vector<double>{1.0, 2.0, 0.5}, {3});
  Tensor y = ops::batch_norm(x, g, b, rm, rv, true, 0.1, 1e-5);
  std::vector<double> yv = y.to_double_vector();
  EXPECT_NEAR(yv[0], 0.32111643, 1e-7);
  EXPECT_NEAR(yv[1], 1.41336338, 1e-7);
  EXPECT_NEAR(yv[4], 0.16497732, 1e-7);
  EXPECT_NEAR(yv[7], -1.27872209, 1e-7);
  EXPECT_NEAR(yv[35], -0.2581465, 1e-7);
  expect_close(rm, {0.44968183592673894, -0.4500079316148411, 0.0003060312059735596}, 1e-12, 1e-12, "running_mean");
  expect_close(rv, {1.0226165869398594, 1.9219314200399256, 0.5725652951315437}, 1e-12, 1e-12, "running_var");
  y.backward(kiln::testing::wave_tensor({2, 2, 3, 3}, DType::f64, 0.3, 1.1, 1.0));
  std::vector<double> dx = x.grad().to_double_vector();
  EXPECT_NEAR(dx[0], 0.7688966, 1e-7);
  EXPECT_NEAR(dx[5], 0.74303548, 1e-7);
  EXPECT_NEAR(dx[17], 0.02433065, 1e-7);
  EXPECT_NEAR(dx[35], -0.81824916, 1e-7);
  expect_close(g.grad(), {1.191754981377486, 1.5271088222020768, 1.2117682740784155}, 1e-10, 1e-10, "dgamma");
  expect_close(b.grad(), {0.41053530603435695, -0.11861540838001339, -0.6371705616302824}, 1e-10, 1e-10, "dbeta");
  std::vector<double> ye = ops::batch_norm(x, g, b, rm, rv, false, 0.1, 1e-5).to_double_vector();
  EXPECT_NEAR(ye[0], -0.10633031, 1e-7);
  EXPECT_NEAR(ye[1], 1.45856606, 1e-7);
  EXPECT_NEAR(ye[35], -0.47748187, 1e-7);
}

namespace {

// The same dtype, shape and bytes (NaN payloads included): what "bit for bit" means below.
void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.defined(), want.defined()) << what;
  if (!got.defined()) return;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  Tensor a = got.contiguous(), b = want.contiguous();
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << what << " differs";
}

}  // namespace

// batch_norm_relu is relu(batch_norm(x) + residual) bit for bit: y, the gradients of x, gamma,
// beta and the residual, and the running statistics, in every dtype, with and without a residual,
// in training and eval, with and without x's gradient (the backward's passes differ: the CPU masks
// the gradient inside batch norm's two passes, writing it once when it is dresidual), through the
// threaded loops (65,536 values), with negative values, zeros of both signs and a NaN in a channel
// of the residual (relu keeps NaN; its gradient passes).
TEST(BatchNormRelu, IsTheThreeOpsBitForBit) {
  // 64 channels, and 24 channels over 1,615 rows (chunks of 170 rows, the last one partial)
  for (const Shape& s : {Shape{4, 16, 16, 64}, Shape{5, 17, 19, 24}}) {
  const int64_t C = s.back();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (bool with_residual : {false, true}) {
      for (bool training : {true, false}) {
      for (bool x_grad : {true, false}) {
        SCOPED_TRACE(shape_str(s) + " " + dtype_name(dt) + (with_residual ? " residual" : " no residual") +
                     (training ? " training" : " eval") + (x_grad ? "" : " no dx"));
        Tensor x0 = randn(s, 40).to(dt), r0 = randn(s, 41).to(dt), gy = randn(s, 42).to(dt);
        std::vector<double> rv = r0.to_double_vector();
        rv[5] = std::nan("");  // channel 5 of the first row
        rv[6] = -0.0;
        r0 = Tensor::from_vector(rv, s).to(dt);
        Tensor g0 = ops::add_scalar(randn({C}, 43), 1.0), b0 = randn({C}, 44);
        Tensor rm0 = randn({C}, 45), rv0 = ops::add_scalar(ops::square(randn({C}, 46)), 0.5);
        struct Run {
          Tensor x, r, g, b, rm, rv, y;
        };
        auto run = [&](bool fused) {
          Run o{x0.detach().clone().set_requires_grad(x_grad), r0.detach().clone().set_requires_grad(true),
                g0.detach().clone().set_requires_grad(true), b0.detach().clone().set_requires_grad(true),
                rm0.detach().clone(), rv0.detach().clone(), Tensor()};
          const Tensor res = with_residual ? o.r : Tensor();
          if (fused) {
            o.y = ops::batch_norm_relu(o.x, o.g, o.b, o.rm, o.rv, training, 0.1, 1e-5, res);
          } else {
            Tensor bn = ops::batch_norm(o.x, o.g, o.b, o.rm, o.rv, training, 0.1, 1e-5);
            o.y = ops::relu(with_residual ? ops::add(bn, res) : bn);
          }
          o.y.backward(gy);
          return o;
        };
        Run f = run(true), u = run(false);
        expect_same_bits(f.y, u.y, "y");
        if (x_grad) expect_same_bits(f.x.grad(), u.x.grad(), "dx");
        else EXPECT_FALSE(f.x.grad().defined() || u.x.grad().defined());
        expect_same_bits(f.g.grad(), u.g.grad(), "dgamma");
        expect_same_bits(f.b.grad(), u.b.grad(), "dbeta");
        expect_same_bits(f.r.grad(), u.r.grad(), "dresidual");
        expect_same_bits(f.rm, u.rm, "running_mean");
        expect_same_bits(f.rv, u.rv, "running_var");
        if (with_residual) {
          EXPECT_TRUE(std::isnan(f.y.to_double_vector()[5])) << "relu(NaN) is NaN";
          EXPECT_TRUE(f.r.grad().defined());
        }
        // The values are relu's: nothing negative, and at least some zeros and positives.
        std::vector<double> yv = f.y.to_double_vector();
        EXPECT_EQ(std::count_if(yv.begin(), yv.end(), [](double v) { return v < 0; }), 0);
        EXPECT_GT(std::count(yv.begin(), yv.end(), 0.0), 1000);
      }
      }
    }
  }
  }
}

// Against the definition in f64: the fused op's gradients pass gradcheck for x, gamma, beta and
// the residual (away from relu's kink, which random inputs avoid).
TEST(BatchNormRelu, Gradcheck) {
  Tensor x = randn({3, 2, 2, 5}, 47, DType::f64).set_requires_grad(true);
  Tensor r = randn({3, 2, 2, 5}, 48, DType::f64).set_requires_grad(true);
  Tensor g = ops::add_scalar(randn({5}, 49, DType::f64), 1.0).set_requires_grad(true);
  Tensor b = randn({5}, 50, DType::f64).set_requires_grad(true);
  kiln::testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::batch_norm_relu(in[0], in[1], in[2], Tensor(), Tensor(), true, 0.1, 1e-5, in[3]);
      },
      {x, g, b, r}, "batch_norm_relu");
}

TEST(BatchNormRelu, ErrorsNameTheResidual) {
  Tensor x = randn({2, 3, 3, 4}, 51), r = randn({2, 3, 3, 5}, 52);
  try {
    ops::batch_norm_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, r);
    ADD_FAILURE() << "a residual of another shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch_norm_relu: residual f32[2, 3, 3, 5]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("must have the shape and dtype of x f32[2, 3, 3, 4]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ops::batch_norm_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, x.to(DType::f64)),
               Error);
}

// The A/B switch (KILN_FUSED_BN_RELU=0): off, the op records batch norm, add and relu as three
// nodes; on, one fused node. The values are the same either way (the test above).
TEST(BatchNormRelu, SwitchOffRunsTheThreeOps) {
  Tensor x = randn({2, 3, 3, 4}, 53).set_requires_grad(true), r = randn({2, 3, 3, 4}, 54);
  const bool was = ops::batch_norm_relu_fused();
  ops::set_batch_norm_relu_fused(true);
  Tensor on = ops::batch_norm_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, r);
  ASSERT_TRUE(on.grad_fn());
  EXPECT_EQ(on.grad_fn()->name(), "batch_norm_relu");
  ops::set_batch_norm_relu_fused(false);
  Tensor off = ops::batch_norm_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, r);
  ops::set_batch_norm_relu_fused(was);
  ASSERT_TRUE(off.grad_fn());
  EXPECT_EQ(off.grad_fn()->name(), "relu");
  EXPECT_EQ(on.to_double_vector(), off.to_double_vector());
}
