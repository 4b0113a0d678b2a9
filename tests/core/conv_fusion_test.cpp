// ops::conv_scale_bias_relu_stats on the CPU (core/ops/conv_fusion.h): the op's contract against a
// naive double-precision reference written here (affine, ReLU, direct convolution, per-channel sums),
// its gradients through the unfused chain, and its errors. The fused GPU kernel is tested against
// the unfused ops in tests/gpu/conv_fusion_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/ops/batch_norm.h"
#include "core/ops/conv_fusion.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "tests/expect_error.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::randn;

namespace {

struct Ref {
  std::vector<double> y, sum, sumsq;
};

// y[n,oh,ow,k] = sum over kh, kw, c of relu(x[n, ih, iw, c] * s[c] + b[c]) * w[k, kh, kw, c].
Ref reference(const Tensor& x, const Tensor& s, const Tensor& b, const Tensor& w, const ops::Conv2dParams& p) {
  const std::vector<double> xv = x.to_double_vector(), sv = s.to_double_vector(), bv = b.to_double_vector(),
                            wv = w.to_double_vector();
  const int64_t N = x.shape()[0], H = x.shape()[1], W = x.shape()[2], C = x.shape()[3];
  const int64_t K = w.shape()[0], KH = w.shape()[1], KW = w.shape()[2];
  const int64_t OH = (H + 2 * p.pad_h - p.dilation_h * (KH - 1) - 1) / p.stride_h + 1;
  const int64_t OW = (W + 2 * p.pad_w - p.dilation_w * (KW - 1) - 1) / p.stride_w + 1;
  Ref r{std::vector<double>(static_cast<size_t>(N * OH * OW * K)), std::vector<double>(K), std::vector<double>(K)};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t k = 0; k < K; ++k) {
          double acc = 0;
          for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw) {
              const int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
              const int64_t iw = ow * p.stride_w - p.pad_w + kw * p.dilation_w;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;  // zero padding of the ReLU's output
              for (int64_t c = 0; c < C; ++c) {
                const double a = std::max(0.0, xv[((n * H + ih) * W + iw) * C + c] * sv[c] + bv[c]);
                acc += a * wv[((k * KH + kh) * KW + kw) * C + c];
              }
            }
          r.y[((n * OH + oh) * OW + ow) * K + k] = acc;
          r.sum[k] += acc;
          r.sumsq[k] += acc * acc;
        }
  return r;
}

struct Case {
  Shape x;
  int64_t k, kh, stride, pad;
};

}  // namespace

TEST(ConvFusion, MatchesTheNaiveReferenceOnTheCpu) {
  const std::vector<Case> cases = {{{2, 7, 6, 5}, 4, 3, 1, 1},   // 3x3, odd sizes
                                   {{1, 8, 8, 6}, 3, 1, 1, 0},   // 1x1, batch 1
                                   {{3, 9, 7, 4}, 5, 3, 2, 1},   // stride 2
                                   {{2, 6, 6, 3}, 2, 1, 2, 0}};  // 1x1 stride 2 (a ResNet downsample)
  for (const Case& c : cases) {
    const int64_t C = c.x[3];
    Tensor x = randn(c.x, 1), s = randn({C}, 2, DType::f32, 0.5), b = randn({C}, 3, DType::f32, 0.5);
    Tensor w = randn({c.k, c.kh, c.kh, C}, 4, DType::f32, 0.3);
    ops::Conv2dParams p;
    p.stride_h = p.stride_w = c.stride;
    p.pad_h = p.pad_w = c.pad;
    ops::ConvFusionChoice how;
    ops::ConvBnStats r = ops::conv_scale_bias_relu_stats(x, s, b, w, p, &how);
    const Ref want = reference(x, s, b, w, p);
    const std::string what = "x " + shape_str(c.x) + " k " + std::to_string(c.kh) + " stride " + std::to_string(c.stride);
    EXPECT_EQ(r.y.dtype(), DType::f32) << what;
    EXPECT_EQ(r.sum.dtype(), DType::f32) << what;
    EXPECT_EQ(r.sumsq.shape(), (Shape{c.k})) << what;
    EXPECT_FALSE(how.fused) << what;  // the CPU has no fused kernel: the op says so
    EXPECT_NE(how.why.find("no fused kernel"), std::string::npos) << how.why;
    kiln::testing::expect_close(r.y, want.y, 1e-5, 1e-5, "y " + what);
    kiln::testing::expect_close(r.sum, want.sum, 1e-4, 1e-5, "sum " + what);
    kiln::testing::expect_close(r.sumsq, want.sumsq, 1e-4, 1e-5, "sumsq " + what);
  }
}

TEST(ConvFusion, Bf16SumsAreOfTheRoundedOutputInF32) {
  Tensor x = randn({2, 5, 5, 8}, 5, DType::bf16), s = randn({8}, 6, DType::bf16, 0.5);
  Tensor b = randn({8}, 7, DType::bf16, 0.5), w = randn({4, 3, 3, 8}, 8, DType::bf16, 0.3);
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  ops::ConvBnStats r = ops::conv_scale_bias_relu_stats(x, s, b, w, p);
  EXPECT_EQ(r.y.dtype(), DType::bf16);
  EXPECT_EQ(r.sum.dtype(), DType::f32);
  const std::vector<double> y = r.y.to_double_vector();
  std::vector<double> sum(4), sq(4);
  for (size_t i = 0; i < y.size(); ++i) sum[i % 4] += y[i], sq[i % 4] += y[i] * y[i];
  kiln::testing::expect_close(r.sum, sum, 1e-3, 1e-5, "bf16 sum");
  kiln::testing::expect_close(r.sumsq, sq, 1e-3, 1e-5, "bf16 sumsq");
  // and y itself is the reference rounded (bf16 activations and products: a few roundings)
  const Ref want = reference(x, s, b, w, p);
  kiln::testing::expect_close(r.y, want.y, 0.05, 0.03, "bf16 y");
}

TEST(ConvFusion, GradientsFlowThroughTheUnfusedChain) {
  // Inputs kept away from ReLU's kink (|x * s| >= 0.1 > |b| + the finite-difference step), where a
  // central difference would straddle it.
  std::vector<double> xv = randn({2, 4, 4, 3}, 9).to_double_vector(), sv = randn({3}, 10).to_double_vector();
  for (double& v : xv) v += v < 0 ? -0.2 : 0.2;
  for (double& v : sv) v = 0.5 + 0.2 * std::fabs(v);
  Tensor x = Tensor::from_vector(xv, {2, 4, 4, 3}, DType::f32), s = Tensor::from_vector(sv, {3}, DType::f32);
  Tensor b = Tensor::from_vector(std::vector<double>{0.02, -0.03, 0.01}, {3}, DType::f32);
  Tensor w = randn({2, 3, 3, 3}, 12, DType::f32, 0.3);
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  // finite differences of y (f32: gradcheck's f32 step and tolerances); then the sums carry gradients too
  for (Tensor* t : {&x, &s, &b, &w}) t->set_requires_grad(true);
  kiln::testing::gradcheck(
      [&](const std::vector<Tensor>& in) { return ops::conv_scale_bias_relu_stats(in[0], in[1], in[2], in[3], p).y; },
      {x, s, b, w}, "conv_scale_bias_relu_stats y");
  for (Tensor* t : {&x, &s, &b, &w}) t->zero_grad();
  ops::ConvFusionChoice how;
  ops::ConvBnStats r = ops::conv_scale_bias_relu_stats(x, s, b, w, p, &how);
  EXPECT_NE(how.why.find("autograd"), std::string::npos) << how.why;
  ops::sum(r.sumsq).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(s.grad().defined());
}

TEST(ConvFusion, BadArgumentsNameTheOpAndTheTensors) {
  Tensor x = randn({1, 4, 4, 3}, 1), s = randn({3}, 2), b = randn({3}, 3), w = randn({2, 1, 1, 3}, 4);
  ops::Conv2dParams p;
  kiln::testing::expect_error([&] { ops::conv_scale_bias_relu_stats(x, randn({4}, 5), b, w, p); },
                        {"conv_scale_bias_relu_stats", "scale", "(Cin) = (3)"});
  kiln::testing::expect_error([&] { ops::conv_scale_bias_relu_stats(x, s, b.to(DType::bf16), w, p); },
                        {"conv_scale_bias_relu_stats", "must share one dtype"});
  kiln::testing::expect_error([&] { ops::conv_scale_bias_relu_stats(x, s, b, randn({2, 1, 1, 4}, 6), p); },
                        {"conv_scale_bias_relu_stats", "(Cout, KH, KW, 3)"});
  kiln::testing::expect_error([&] { ops::conv_scale_bias_relu_stats(x.reshape({4, 4, 3}), s, b, w, p); },
                        {"conv_scale_bias_relu_stats", "(N, H, W, Cin)"});
  ops::Conv2dParams g;
  g.groups = 3;
  kiln::testing::expect_error([&] { ops::conv_scale_bias_relu_stats(x, s, b, randn({3, 1, 1, 1}, 7), g); },
                        {"conv_scale_bias_relu_stats", "groups 1"});
  Tensor i = Tensor::from_vector(std::vector<int64_t>(48, 1), {1, 4, 4, 3});
  kiln::testing::expect_error([&] { ops::conv_scale_bias_relu_stats(i, s, b, w, p); },
                        {"conv_scale_bias_relu_stats", "accepted dtypes"});
}

// Stage 2's finalize: the batch norm of y computed from the fused op's sums equals ops::batch_norm on y
// in training (its output as y * scale + bias, and the running statistics it updates).
TEST(ConvFusion, BnFinalizeFromTheSumsIsTheBatchNormOfY) {
  Tensor x = randn({3, 6, 5, 8}, 21), s = randn({8}, 22, DType::f32, 0.5), b = randn({8}, 23, DType::f32, 0.5);
  Tensor w = randn({6, 3, 3, 8}, 24, DType::f32, 0.3);
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  ops::ConvBnStats r = ops::conv_scale_bias_relu_stats(x, s, b, w, p);
  Tensor gamma = randn({6}, 25, DType::f32, 0.2), beta = randn({6}, 26, DType::f32, 0.2);
  gamma = ops::add_scalar(gamma, 1.0);
  Tensor rm = randn({6}, 27, DType::f32, 0.1), rv = ops::add_scalar(randn({6}, 28, DType::f32, 0.1), 1.0);
  Tensor rm2 = rm.clone(), rv2 = rv.clone();
  const int64_t count = 3 * 6 * 5;
  ops::BnFinalized f = ops::bn_finalize(r.sum, r.sumsq, count, gamma, beta, rm, rv, 0.1, 1e-5, DType::f32);
  Tensor want = ops::batch_norm(r.y, gamma, beta, rm2, rv2, /*training=*/true, 0.1, 1e-5);
  Tensor got = ops::add(ops::mul(r.y, f.scale), f.bias);
  kiln::testing::expect_close(got, want.to_double_vector(), 2e-5, 2e-5, "y * scale + bias vs batch_norm(y)");
  kiln::testing::expect_close(rm, rm2.to_double_vector(), 1e-6, 1e-5, "running mean");
  kiln::testing::expect_close(rv, rv2.to_double_vector(), 1e-6, 1e-5, "running var");
  EXPECT_EQ(ops::bn_finalize(r.sum, r.sumsq, count, gamma, beta, Tensor(), Tensor(), 0.1, 1e-5, DType::bf16).scale.dtype(),
            DType::bf16);
  kiln::testing::expect_error(
      [&] { ops::bn_finalize(r.sum, r.sumsq, 1, gamma, beta, Tensor(), Tensor(), 0.1, 1e-5, DType::f32); },
      {"bn_finalize", "count 1"});
  kiln::testing::expect_error(
      [&] { ops::bn_finalize(r.sum, r.sumsq, count, randn({5}, 1), beta, Tensor(), Tensor(), 0.1, 1e-5, DType::f32); },
      {"bn_finalize", "must be (6)"});
}

// Stage 2's training op: the same values as the op, and through its own backward (recomputed affine +
// ReLU, conv2d's backward kernel, the sums' nodes folded into dy) the same gradients for x, scale,
// bias and w as autograd through the unfused chain, with a loss that reads y, sum and sumsq. f32;
// tolerance 1e-5 relative to each gradient's largest element (the two sum the same terms in a
// different order).
TEST(ConvFusion, TrainingOpGradientsEqualTheUnfusedChains) {
  for (int64_t stride : {1, 2}) {
    SCOPED_TRACE("stride " + std::to_string(stride));
    ops::Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    p.stride_h = p.stride_w = stride;
    const Tensor x0 = randn({3, 7, 6, 5}, 31), s0 = randn({5}, 32, DType::f32, 0.5), b0 = randn({5}, 33, DType::f32, 0.5);
    const Tensor w0 = randn({4, 3, 3, 5}, 34, DType::f32, 0.3);
    auto run = [&](bool train, std::vector<Tensor>& in) {
      in = {x0.clone(), s0.clone(), b0.clone(), w0.clone()};
      for (Tensor& t : in) t.set_requires_grad(true);
      ops::ConvBnStats r = train ? ops::conv_scale_bias_relu_stats_train(in[0], in[1], in[2], in[3], p)
                                 : ops::conv_scale_bias_relu_stats_unfused(in[0], in[1], in[2], in[3], p);
      const Tensor ry = randn(r.y.shape(), 35), rs = randn({4}, 36), rq = randn({4}, 37, DType::f32, 0.1);
      ops::add(ops::add(ops::sum(ops::mul(r.y, ry)), ops::sum(ops::mul(r.sum, rs))), ops::sum(ops::mul(r.sumsq, rq)))
          .backward();
      return r;
    };
    std::vector<Tensor> a, b;
    const ops::ConvBnStats want = run(false, a), got = run(true, b);
    EXPECT_EQ(got.y.to_double_vector(), want.y.to_double_vector());
    kiln::testing::expect_close(got.sum, want.sum.to_double_vector(), 1e-5, 1e-5, "sum");
    kiln::testing::expect_close(got.sumsq, want.sumsq.to_double_vector(), 1e-4, 1e-5, "sumsq");
    const char* names[] = {"dx", "dscale", "dbias", "dw"};
    for (size_t i = 0; i < 4; ++i) {
      ASSERT_TRUE(b[i].grad().defined()) << names[i];
      const std::vector<double> w = a[i].grad().to_double_vector();
      double m = 0;
      for (double v : w) m = std::max(m, std::fabs(v));
      kiln::testing::expect_close(b[i].grad(), w, 1e-5 * m, 1e-5, names[i]);
    }
  }
  // Only the gradients asked for: w alone.
  ops::Conv2dParams p;
  Tensor x = randn({2, 3, 3, 2}, 41), s = randn({2}, 42), b = randn({2}, 43), w = randn({3, 1, 1, 2}, 44);
  w.set_requires_grad(true);
  ops::sum(ops::conv_scale_bias_relu_stats_train(x, s, b, w, p).sumsq).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
  kiln::testing::expect_error([&] { ops::conv_scale_bias_relu_stats_train(randn({0, 3, 3, 2}, 1), s, b, w, p); },
                              {"conv_scale_bias_relu_stats", "non-empty batch"});
}

// bn_finalize records: its scale and bias carry gradients to the sums, gamma and beta (finite
// differences in f32, gradcheck's tolerances), the running statistics stay unrecorded.
TEST(ConvFusion, BnFinalizeGradients) {
  std::vector<double> sv = randn({3}, 51).to_double_vector(), qv(3);
  for (size_t c = 0; c < 3; ++c) qv[c] = sv[c] * sv[c] / 10.0 + 5.0 + c;  // var = sumsq/10 - mean^2 > 0
  Tensor sum = Tensor::from_vector(sv, {3}, DType::f32).set_requires_grad(true);
  Tensor sumsq = Tensor::from_vector(qv, {3}, DType::f32).set_requires_grad(true);
  Tensor gamma = ops::add_scalar(randn({3}, 52, DType::f32, 0.2), 1.0).set_requires_grad(true);
  Tensor beta = randn({3}, 53).set_requires_grad(true);
  // scale alone does not depend on beta: a mix of both outputs.
  kiln::testing::gradcheck(
      [&](const std::vector<Tensor>& in) {
        ops::BnFinalized f = ops::bn_finalize(in[0], in[1], 10, in[2], in[3], Tensor(), Tensor(), 0.1, 1e-5, DType::f32);
        return ops::add(ops::mul_scalar(f.scale, 3.0), f.bias);
      },
      {sum, sumsq, gamma, beta}, "bn_finalize scale and bias");
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  ops::bn_finalize(sum, sumsq, 10, gamma, beta, rm, rv, 0.1, 1e-5, DType::f32);
  EXPECT_FALSE(rm.requires_grad());
  EXPECT_FALSE(rv.requires_grad());
}

// Stage 3's backward op (the training op's node calls it; on the CPU it is the unfused chain): the
// gradients of <gy, y> against autograd through the unfused forward chain, each subset of the
// gradients asked for giving the same values as the full call and leaving the others undefined.
TEST(ConvFusion, BackwardOpEqualsAutogradThroughTheUnfusedChain) {
  for (int64_t stride : {1, 2}) {
    SCOPED_TRACE("stride " + std::to_string(stride));
    ops::Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    p.stride_h = p.stride_w = stride;
    std::vector<Tensor> in = {randn({2, 7, 6, 5}, 61), randn({5}, 62, DType::f32, 0.5), randn({5}, 63, DType::f32, 0.5),
                              randn({4, 3, 3, 5}, 64, DType::f32, 0.3)};
    for (Tensor& t : in) t.set_requires_grad(true);
    const Tensor y = ops::conv_scale_bias_relu_stats_unfused(in[0], in[1], in[2], in[3], p).y;
    const Tensor gy = randn(y.shape(), 65);
    ops::sum(ops::mul(y, gy)).backward();
    ops::ConvFusionBackwardChoice how;
    const ops::ConvBnGrads all = ops::conv_scale_bias_relu_backward(gy, in[0].detach(), in[1].detach(), in[2].detach(),
                                                                    in[3].detach(), p, {true, true, true, true}, &how);
    EXPECT_FALSE(how.dgrad.fused);
    EXPECT_FALSE(how.wgrad.fused);
    EXPECT_NE(how.dgrad.why.find("no fused kernel"), std::string::npos) << how.dgrad.why;
    const Tensor got[] = {all.dx, all.dscale, all.dbias, all.dw};
    const char* names[] = {"dx", "dscale", "dbias", "dw"};
    for (size_t i = 0; i < 4; ++i) {
      ASSERT_TRUE(got[i].defined()) << names[i];
      EXPECT_EQ(got[i].shape(), in[i].shape()) << names[i];
      const std::vector<double> want = in[i].grad().to_double_vector();
      double m = 0;
      for (double v : want) m = std::max(m, std::fabs(v));
      kiln::testing::expect_close(got[i], want, 1e-5 * m, 1e-5, names[i]);
    }
    for (int mask = 1; mask < 16; ++mask) {
      const ops::ConvFusionNeeds need{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0, (mask & 8) != 0};
      const ops::ConvBnGrads g = ops::conv_scale_bias_relu_backward(gy, in[0].detach(), in[1].detach(),
                                                                    in[2].detach(), in[3].detach(), p, need);
      const Tensor part[] = {g.dx, g.dscale, g.dbias, g.dw};
      for (size_t i = 0; i < 4; ++i) {
        ASSERT_EQ(part[i].defined(), (mask >> i & 1) != 0) << names[i] << " mask " << mask;
        if (part[i].defined()) {
          EXPECT_EQ(part[i].to_double_vector(), got[i].to_double_vector()) << names[i];
        }
      }
    }
  }
}

TEST(ConvFusion, BackwardOpBf16GradientsAreInTheDtype) {
  ops::Conv2dParams p;
  const Tensor x = randn({2, 4, 4, 3}, 71, DType::bf16), s = randn({3}, 72, DType::bf16), b = randn({3}, 73, DType::bf16);
  const Tensor w = randn({2, 1, 1, 3}, 74, DType::bf16, 0.5), gy = randn({2, 4, 4, 2}, 75, DType::bf16);
  const ops::ConvBnGrads g = ops::conv_scale_bias_relu_backward(gy, x, s, b, w, p, {true, true, true, true});
  for (const Tensor* t : {&g.dx, &g.dscale, &g.dbias, &g.dw}) EXPECT_EQ(t->dtype(), DType::bf16) << t->str();
  // dbias = sum over (N, H, W) of gy @ w where x*s + b > 0, accumulated in f32, rounded once.
  const std::vector<double> wv = w.to_double_vector(), gv = gy.to_double_vector(), db = g.dbias.to_double_vector();
  const std::vector<double> a = ops::relu(ops::add(ops::mul(x, s), b)).to_double_vector();  // bf16, as the forward's
  for (int64_t c = 0; c < 3; ++c) {
    double want = 0;
    for (int64_t r = 0; r < 32; ++r) {
      if (!(a[r * 3 + c] > 0)) continue;
      for (int64_t k = 0; k < 2; ++k) want += gv[r * 2 + k] * wv[k * 3 + c];
    }
    EXPECT_NEAR(db[c], want, 0.02 * (std::fabs(want) + 1.0)) << "channel " << c;
  }
}

TEST(ConvFusion, BackwardOpBadArgumentsNameTheOp) {
  Tensor x = randn({1, 4, 4, 3}, 1), s = randn({3}, 2), b = randn({3}, 3), w = randn({2, 1, 1, 3}, 4);
  ops::Conv2dParams p;
  kiln::testing::expect_error(
      [&] { ops::conv_scale_bias_relu_backward(randn({1, 4, 4, 3}, 5), x, s, b, w, p, {true, true, true, true}); },
      {"conv_scale_bias_relu_stats backward", "gy", "[1, 4, 4, 2]"});
  kiln::testing::expect_error(
      [&] {
        ops::conv_scale_bias_relu_backward(randn({1, 4, 4, 2}, 5, DType::bf16), x, s, b, w, p, {true, false, false, false});
      },
      {"conv_scale_bias_relu_stats backward", "x's dtype f32"});
  kiln::testing::expect_error(
      [&] { ops::conv_scale_bias_relu_backward(randn({1, 4, 4, 2}, 5), x, randn({4}, 6), b, w, p, {true, true, true, true}); },
      {"conv_scale_bias_relu_stats", "(Cin) = (3)"});
}

// The plan cache's bound (kiln::detail::LruKeys, core/ops/conv_fusion.h): the least recently used
// key goes first, a touch refreshes a key, an erased key frees its place.
TEST(ConvFusion, PlanCacheBoundDropsTheLeastRecentlyUsed) {
  kiln::detail::LruKeys<int> lru(3);
  EXPECT_TRUE(lru.touch(1).empty());
  EXPECT_TRUE(lru.touch(2).empty());
  EXPECT_TRUE(lru.touch(3).empty());
  EXPECT_TRUE(lru.touch(1).empty());  // 1 is now the most recent: 2 is the oldest
  EXPECT_EQ(lru.touch(4), std::vector<int>{2});
  EXPECT_EQ(lru.size(), 3u);
  EXPECT_TRUE(lru.contains(1) && lru.contains(3) && lru.contains(4));
  EXPECT_FALSE(lru.contains(2));
  lru.erase(3);  // a refused shape leaves the bound
  lru.erase(42);  // absent: nothing happens
  EXPECT_TRUE(lru.touch(5).empty());
  EXPECT_EQ(lru.touch(6), std::vector<int>{1});
  EXPECT_EQ(lru.size(), 3u);
  kiln::detail::LruKeys<int> one(0);  // a capacity below 1 is 1: the newest key stays
  EXPECT_EQ(one.capacity(), 1u);
  EXPECT_TRUE(one.touch(7).empty());
  EXPECT_EQ(one.touch(8), std::vector<int>{7});
  EXPECT_TRUE(one.contains(8));
  EXPECT_GE(kiln::detail::kConvFusionCacheEntries, 3u * 19u);  // ResNet-50's three graphs per shape, one batch
}
