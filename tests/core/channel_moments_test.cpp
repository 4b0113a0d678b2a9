// ops::channel_moments / record_channel_moments (core/ops/channel_moments.h) on the CPU: the sums, and
// the one-node backward against autograd through the chain of public ops it replaces (with a
// gradient from y's other consumers added by the engine, one sum unused, bf16 y), and the errors.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/ops/channel_moments.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "tests/expect_error.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::randn;

namespace {
// L = sum(ws * sum(y)) + sum(wq * sum(y^2)) + sum(wy * y): the gradient a fused conv's y receives.
Tensor loss(const ops::ChannelMoments& m, const Tensor& y, const Tensor& ws, const Tensor& wq, const Tensor& wy) {
  return ops::add(ops::add(ops::sum(ops::mul(m.sum, ws)), ops::sum(ops::mul(m.sumsq, wq))), ops::sum(ops::mul(y, wy)));
}
}  // namespace

TEST(ChannelMoments, SumsAndGradientEqualThePublicOpChain) {
  for (const Shape& shape : {Shape{2, 3, 5, 8}, Shape{4, 7}, Shape{1, 1, 1, 3}}) {
    const int64_t c = shape.back();
    Tensor y = randn(shape, 1, DType::f32, 2.0);
    Tensor ws = randn({c}, 2), wq = randn({c}, 3), wy = randn(shape, 4);
    Tensor y1 = y.clone(), y2 = y.clone();
    y1.set_requires_grad(true);
    y2.set_requires_grad(true);
    std::vector<int64_t> dims;
    for (int64_t i = 0; i + 1 < y.dim(); ++i) dims.push_back(i);
    ops::ChannelMoments want{ops::sum(y1, dims), ops::sum(ops::square(y1), dims)};
    ops::ChannelMoments got = ops::channel_moments(y2);
    const std::string what = shape_str(shape);
    kiln::testing::expect_close(got.sum, want.sum.to_double_vector(), 1e-5, 1e-5, "sum " + what);
    kiln::testing::expect_close(got.sumsq, want.sumsq.to_double_vector(), 1e-5, 1e-5, "sumsq " + what);
    loss(want, y1, ws, wq, wy).backward();
    loss(got, y2, ws, wq, wy).backward();
    kiln::testing::expect_close(y2.grad(), y1.grad().to_double_vector(), 1e-5, 1e-5, "dy " + what);
  }
}

TEST(ChannelMoments, RecordedSumsCarryTheGradientOfEachPart) {
  // Sums given from elsewhere (the fused kernel's) and only sumsq used: dy = 2 * y * g_sumsq[c].
  Tensor y = randn({3, 4, 6}, 5);
  y.set_requires_grad(true);
  Tensor s, q;
  {
    NoGradGuard ng;
    s = ops::sum(y.detach(), {0, 1});
    q = ops::sum(ops::square(y.detach()), {0, 1});
  }
  ops::ChannelMoments m = ops::record_channel_moments(y, s, q);
  Tensor w = randn({6}, 6);
  ops::sum(ops::mul(m.sumsq, w)).backward();
  const std::vector<double> yv = y.to_double_vector(), wv = w.to_double_vector();
  std::vector<double> want(yv.size());
  for (size_t i = 0; i < yv.size(); ++i) want[i] = 2.0 * yv[i] * wv[i % 6];
  kiln::testing::expect_close(y.grad(), want, 1e-6, 1e-6, "dy from sumsq alone");
  // y needs no gradient: the sums come back as they are, unrecorded.
  ops::ChannelMoments plain = ops::record_channel_moments(y.detach(), s, q);
  EXPECT_FALSE(plain.sum.requires_grad());
  EXPECT_EQ(plain.sum.to_double_vector(), s.to_double_vector());
}

TEST(ChannelMoments, Bf16ActivationsGetABf16GradientRoundedOnce) {
  Tensor yf = randn({2, 5, 16}, 7);
  Tensor y = yf.to(DType::bf16);
  y.set_requires_grad(true);
  ops::ChannelMoments m = ops::channel_moments(y);
  Tensor ws = randn({16}, 8), wq = randn({16}, 9);
  ops::add(ops::sum(ops::mul(m.sum, ws)), ops::sum(ops::mul(m.sumsq, wq))).backward();
  ASSERT_EQ(y.grad().dtype(), DType::bf16);
  const std::vector<double> yv = y.detach().to(DType::f32).to_double_vector(), a = ws.to_double_vector(),
                            b = wq.to_double_vector();
  std::vector<double> want(yv.size());
  for (size_t i = 0; i < yv.size(); ++i) want[i] = a[i % 16] + 2.0 * yv[i] * b[i % 16];
  kiln::testing::expect_close(y.grad().to(DType::f32), want, 1e-2, 1e-2, "bf16 dy");
}

TEST(ChannelMoments, BadSumsAreErrorsNamingThem) {
  Tensor y = randn({2, 3, 4}, 1);
  y.set_requires_grad(true);
  kiln::testing::expect_error([&] { ops::record_channel_moments(y, Tensor::zeros({3}), Tensor::zeros({4})); },
                              {"channel_moments: ", "must be a (4) f32 tensor (one sum per channel of y"});
  kiln::testing::expect_error([&] { ops::channel_moments(Tensor::zeros({0, 4})); },
                              {"must be non-empty channels-last activations"});
}
