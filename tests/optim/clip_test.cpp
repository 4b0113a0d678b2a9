// Gradient utilities: global norm, clipping (as torch.nn.utils.clip_grad_norm_), zero_grad, the
// 1-D no-decay rule, non-contiguous gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "optim/param.h"
#include "optim_test_util.h"

using namespace kiln;
using kiln::testing::make_param;
using kiln::testing::set_grad;

TEST(ClipGradNorm, ScalesToMaxNormAndReturnsTheNorm) {
  auto a = make_param("a", {0.0f, 0.0f});
  auto b = make_param("b", {0.0f});
  auto c = make_param("c", {0.0f});  // no gradient
  set_grad(a, {3.0f, 0.0f});
  set_grad(b, {4.0f});
  // norm = 5; coef = 1 / (5 + 1e-6)
  double norm = clip_grad_norm({a, b, c}, 1.0);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  double coef = 1.0 / (5.0 + 1e-6);
  EXPECT_FLOAT_EQ(a.param.grad().to_float_vector()[0], static_cast<float>(3.0 * coef));
  EXPECT_FLOAT_EQ(b.param.grad().to_float_vector()[0], static_cast<float>(4.0 * coef));
  EXPECT_NEAR(grad_norm({a, b, c}), 1.0, 1e-6);
  EXPECT_FALSE(c.param.grad().defined());
}

TEST(ClipGradNorm, BelowMaxNormLeavesGradsAlone) {
  auto a = make_param("a", {0.0f, 0.0f});
  set_grad(a, {0.3f, -0.4f});
  EXPECT_NEAR(clip_grad_norm({a}, 1.0), 0.5, 1e-7);
  EXPECT_EQ(a.param.grad().to_float_vector(), (std::vector<float>{0.3f, -0.4f}));
}

TEST(ClipGradNorm, InfinityNorm) {
  auto a = make_param("a", {0.0f, 0.0f, 0.0f});
  set_grad(a, {1.0f, -6.0f, 2.0f});
  double norm = clip_grad_norm({a}, 3.0, std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(norm, 6.0);
  auto g = a.param.grad().to_float_vector();
  EXPECT_NEAR(g[1], -3.0f, 1e-5);
  EXPECT_NEAR(g[0], 0.5f, 1e-6);
  EXPECT_THROW(grad_norm({a}, 1.0), Error);
}

TEST(ClipGradNorm, NonFiniteNormLeavesGradsAlone) {
  auto a = make_param("a", {0.0f, 0.0f});
  set_grad(a, {std::numeric_limits<float>::infinity(), 1.0f});
  EXPECT_TRUE(std::isinf(clip_grad_norm({a}, 1.0)));
  EXPECT_EQ(a.param.grad().to_float_vector()[1], 1.0f);
  set_grad(a, {std::nanf(""), 1.0f});
  EXPECT_TRUE(std::isnan(clip_grad_norm({a}, 1.0, std::numeric_limits<double>::infinity())));
  EXPECT_THROW(clip_grad_norm({a}, 0.0), Error);
}

TEST(ClipGradNorm, NonContiguousAndLowPrecisionGradsAreMadeDense) {
  auto a = make_param("a", {0.0f, 0.0f, 0.0f, 0.0f}, {2, 2});
  Tensor t = a.param;
  t.set_grad(Tensor::from_vector(std::vector<float>{3.0f, 0.0f, 0.0f, 4.0f}, {2, 2}).transpose(0, 1));
  ASSERT_FALSE(a.param.grad().is_contiguous());
  clip_grad_norm({a}, 1.0);
  EXPECT_TRUE(a.param.grad().is_contiguous());
  EXPECT_NEAR(a.param.grad().to_float_vector()[3], 0.8f, 1e-6);
  t.set_grad(Tensor::from_vector(std::vector<float>{3.0f, 0.0f, 0.0f, 4.0f}, {2, 2}, DType::bf16));
  EXPECT_DOUBLE_EQ(grad_norm({a}), 5.0);
  EXPECT_EQ(a.param.grad().dtype(), DType::f32);
}

TEST(Params, ZeroGradAndNoDecayRule) {
  std::vector<ParamRef> ps = {make_param("conv.weight", {1, 2, 3, 4}, {1, 2, 2, 1}), make_param("conv.bias", {0.0f}),
                              make_param("bn.weight", {1.0f, 1.0f}), make_param("fc.weight", {1, 2}, {1, 2})};
  EXPECT_EQ(mark_no_decay_1d(ps), 2);
  EXPECT_FALSE(ps[0].no_decay);
  EXPECT_TRUE(ps[1].no_decay);
  EXPECT_TRUE(ps[2].no_decay);
  EXPECT_FALSE(ps[3].no_decay);
  for (auto& p : ps) set_grad(p, std::vector<float>(p.param.numel(), 1.0f));
  zero_grad(ps);
  for (auto& p : ps) EXPECT_FALSE(p.param.grad().defined()) << p.name;
}
