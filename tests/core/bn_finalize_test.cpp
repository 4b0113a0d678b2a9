// ops::bn_finalize's kernels (core/ops/bn_finalize.h, core/cpu/bn_finalize.cpp) against the chain of
// public ops they replace (bn_finalize_unfused): scale, bias, mean, invstd, the running statistics and
// the gradients of sum, sumsq, gamma and beta, with and without gamma/beta, a channel whose variance
// clamps to 0, and bf16 outputs. The op's contract against batch_norm itself: tests/core/conv_fusion_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/ops/bn_finalize.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::randn;

namespace {
struct Case {
  bool gamma, beta, running;
  DType out;
};

// Sums of `count` values per channel whose variance is positive, except channel 0 where it is exactly
// 0 (every value equal: sumsq/count = mean^2), which the finalize clamps.
void sums(int64_t c, int64_t count, Tensor* s, Tensor* q) {
  std::vector<double> sv = randn({c}, 61).to_double_vector(), qv(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) {
    const double mean = sv[i];
    sv[i] = mean * count;
    qv[i] = (mean * mean + (i == 0 ? 0.0 : 0.5 + 0.1 * i)) * count;
  }
  *s = Tensor::from_vector(sv, {c}, DType::f32);
  *q = Tensor::from_vector(qv, {c}, DType::f32);
}
}  // namespace

TEST(BnFinalize, KernelsEqualThePublicOpChain) {
  const int64_t C = 7, count = 40;
  for (const Case& k : {Case{true, true, true, DType::f32}, Case{false, true, false, DType::f32},
                        Case{true, false, true, DType::bf16}, Case{false, false, false, DType::f16}}) {
    SCOPED_TRACE(std::string("gamma ") + (k.gamma ? "yes" : "no") + ", beta " + (k.beta ? "yes" : "no") + ", out " +
                 dtype_name(k.out));
    Tensor s0, q0;
    sums(C, count, &s0, &q0);
    const Tensor g0 = ops::add_scalar(randn({C}, 62, DType::f32, 0.3), 1.0), b0 = randn({C}, 63);
    const Tensor rm0 = randn({C}, 64, DType::f32, 0.1), rv0 = ops::add_scalar(randn({C}, 65, DType::f32, 0.1), 1.0);
    const Tensor ws = randn({C}, 66), wb = randn({C}, 67);
    auto run = [&](bool kernels, std::vector<Tensor>& in, Tensor& rm, Tensor& rv) {
      in = {s0.clone(), q0.clone(), k.gamma ? g0.clone() : Tensor(), k.beta ? b0.clone() : Tensor()};
      for (Tensor& t : in)
        if (t.defined()) t.set_requires_grad(true);
      rm = k.running ? rm0.clone() : Tensor();
      rv = k.running ? rv0.clone() : Tensor();
      ops::BnFinalized f = kernels ? ops::bn_finalize(in[0], in[1], count, in[2], in[3], rm, rv, 0.1, 1e-5, k.out)
                                   : ops::bn_finalize_unfused(in[0], in[1], count, in[2], in[3], rm, rv, 0.1, 1e-5, k.out);
      EXPECT_EQ(f.scale.dtype(), k.out);
      EXPECT_EQ(f.bias.dtype(), k.out);
      ops::add(ops::sum(ops::mul(f.scale.to(DType::f32), ws)), ops::sum(ops::mul(f.bias.to(DType::f32), wb))).backward();
      return f;
    };
    std::vector<Tensor> a, b;
    Tensor rma, rva, rmb, rvb;
    const ops::BnFinalized want = run(false, a, rma, rva), got = run(true, b, rmb, rvb);
    const double tol = k.out == DType::f32 ? 1e-5 : 1e-2;
    kiln::testing::expect_close(got.scale.to(DType::f32), want.scale.to(DType::f32).to_double_vector(), tol, tol, "scale");
    kiln::testing::expect_close(got.bias.to(DType::f32), want.bias.to(DType::f32).to_double_vector(), tol, tol, "bias");
    kiln::testing::expect_close(got.mean, want.mean.to_double_vector(), 1e-6, 1e-6, "mean");
    kiln::testing::expect_close(got.invstd, want.invstd.to_double_vector(), 1e-4, 1e-5, "invstd");
    if (k.running) {
      kiln::testing::expect_close(rmb, rma.to_double_vector(), 1e-6, 1e-6, "running_mean");
      kiln::testing::expect_close(rvb, rva.to_double_vector(), 1e-6, 1e-5, "running_var");
    }
    const char* names[] = {"d sum", "d sumsq", "d gamma", "d beta"};
    for (size_t i = 0; i < 4; ++i) {
      if (!a[i].defined()) continue;
      ASSERT_TRUE(b[i].grad().defined()) << names[i];
      const std::vector<double> w = a[i].grad().to_double_vector();
      double m = 0;
      for (double v : w) m = std::max(m, std::fabs(v));
      // The chain rounds each step to f32 (or the outputs' dtype); the kernels compute in f64.
      kiln::testing::expect_close(b[i].grad(), w, (k.out == DType::f32 ? 1e-4 : 2e-2) * m, 1e-4, names[i]);
    }
    // Channel 0's variance clamped to 0: no gradient reaches its sumsq, as relu's backward.
    EXPECT_EQ(b[1].grad().to_double_vector()[0], 0.0);
    EXPECT_EQ(a[1].grad().to_double_vector()[0], 0.0);
  }
}

// Only what needs a gradient gets one; nothing is recorded in no-grad mode.
TEST(BnFinalize, RecordsOnlyWhereAGradientIsNeeded) {
  Tensor s, q;
  sums(3, 10, &s, &q);
  Tensor gamma = ops::add_scalar(randn({3}, 71), 1.0).set_requires_grad(true);
  ops::BnFinalized f = ops::bn_finalize(s, q, 10, gamma, Tensor(), Tensor(), Tensor(), 0.1, 1e-5, DType::f32);
  ops::sum(f.scale).backward();
  EXPECT_TRUE(gamma.grad().defined());
  EXPECT_FALSE(s.grad().defined());
  {
    NoGradGuard ng;
    ops::BnFinalized h = ops::bn_finalize(s, q, 10, gamma, Tensor(), Tensor(), Tensor(), 0.1, 1e-5, DType::f32);
    EXPECT_FALSE(h.scale.requires_grad());
  }
}
