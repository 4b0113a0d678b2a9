// Autograd engine: accumulation, no-grad, hook order, checkpointing.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::randn;

TEST(Autograd, DiamondAccumulates) {
  // y = a*x + exp(x): x is used twice; dy/dx = a + exp(x).
  Tensor x = Tensor::from_vector(std::vector<double>{0.5, -1.0, 2.0}, {3}).set_requires_grad(true);
  Tensor a = Tensor::from_vector(std::vector<double>{3.0, 4.0, 5.0}, {3});
  Tensor y = ops::sum(ops::add(ops::mul(a, x), ops::exp(x)));
  y.backward();
  auto g = x.grad().to_double_vector();
  EXPECT_NEAR(g[0], 3.0 + std::exp(0.5), 1e-12);
  EXPECT_NEAR(g[1], 4.0 + std::exp(-1.0), 1e-12);
  EXPECT_NEAR(g[2], 5.0 + std::exp(2.0), 1e-12);
  // A second backward accumulates into .grad.
  ops::sum(ops::mul(a, x)).backward();
  EXPECT_NEAR(x.grad().to_double_vector()[0], 6.0 + std::exp(0.5), 1e-12);
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = Tensor::ones({4}).set_requires_grad(true);
  {
    NoGradGuard ng;
    Tensor y = ops::mul_scalar(x, 2.0);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  Tensor y = ops::mul_scalar(x, 2.0);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(y.grad_fn()->name(), "mul_scalar");
  EXPECT_THROW(ops::sum(Tensor::ones({2})).backward(), Error);
}

TEST(Autograd, HooksFireOncePerParameterInReverseOrder) {
  // Three "layers" applied in order w0, w1, w2: the gradients complete in reverse.
  std::vector<Tensor> w;
  for (int i = 0; i < 3; ++i) w.push_back(randn({5}, 10 + i).set_requires_grad(true));
  std::vector<int> order;
  for (int i = 0; i < 3; ++i) w[i].register_grad_ready_hook([&order, i](const Tensor&) { order.push_back(i); });
  Tensor h = randn({5}, 1);
  for (int i = 0; i < 3; ++i) h = ops::relu(ops::add(ops::mul(h, w[i]), w[i]));  // w[i] used twice
  ops::sum(h).backward();
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
}

TEST(Autograd, ViewsPropagateGradients) {
  Tensor x = randn({2, 3, 4}, 3, DType::f64).set_requires_grad(true);
  kiln::testing::gradcheck([](const std::vector<Tensor>& in) {
    Tensor p = in[0].permute({2, 0, 1}).slice(0, 1, 4, 2).reshape({2, -1});
    return ops::mul(p, p);
  }, {x}, "permute/slice/reshape");
}

TEST(Autograd, BroadcastBinaryOpsGradcheck) {
  Tensor a = randn({2, 3, 4}, 4, DType::f64).set_requires_grad(true);
  Tensor b = ops::add_scalar(randn({4}, 5, DType::f64), 3.0).set_requires_grad(true);
  Tensor c = randn({3, 1}, 6, DType::f64).set_requires_grad(true);
  kiln::testing::gradcheck([](const std::vector<Tensor>& in) {
    return ops::div(ops::sub(ops::mul(in[0], in[1]), in[2]), in[1]);
  }, {a, b, c}, "broadcast mul/sub/div");
}

TEST(Autograd, CheckpointMatchesPlainRunAndLowersPeak) {
  // 24 layers in 4 checkpointed segments of 6: only the segment boundaries stay alive in forward.
  Tensor w1 = randn({256, 256}, 7, DType::f32, 0.5).set_requires_grad(true);
  Tensor w2 = randn({256, 256}, 8).set_requires_grad(true);
  auto segment = [&](const std::vector<Tensor>& in) {
    Tensor h = in[0];
    for (int i = 0; i < 6; ++i) h = ops::relu(ops::add(ops::mul(h, w1), w2));
    return h;
  };
  auto net = [&](Tensor h, bool ckpt) {
    for (int s = 0; s < 4; ++s) h = ckpt ? checkpoint(segment, {h}) : segment({h});
    return ops::sum(h);
  };
  Tensor x = randn({256, 256}, 9).set_requires_grad(true);
  CachingAllocator& alloc = allocator_for(Device::cpu());

  alloc.reset_peak();
  size_t base = alloc.stats().allocated;
  net(x, false).backward();
  size_t plain_peak = alloc.stats().peak - base;
  auto gx = x.grad().to_double_vector(), g1 = w1.grad().to_double_vector(), g2 = w2.grad().to_double_vector();
  x.zero_grad();
  w1.zero_grad();
  w2.zero_grad();

  alloc.reset_peak();
  base = alloc.stats().allocated;
  net(x, true).backward();
  size_t ckpt_peak = alloc.stats().peak - base;
  // The same products, summed in another grouping (per segment): equal to f32 rounding.
  kiln::testing::expect_close(x.grad(), gx, 1e-6, 1e-5, "checkpointed dx");
  kiln::testing::expect_close(w1.grad(), g1, 1e-6, 1e-5, "checkpointed dw1");
  kiln::testing::expect_close(w2.grad(), g2, 1e-6, 1e-5, "checkpointed dw2");
  EXPECT_LT(ckpt_peak, plain_peak * 7 / 10) << "plain " << plain_peak << " checkpointed " << ckpt_peak;
}

TEST(Autograd, ErrorsNameOpAndShapes) {
  try {
    ops::add(Tensor::ones({2, 3}), Tensor::ones({4}));
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::add(Tensor::ones({2}), Tensor::ones({2}, DType::f64)), Error);
}

// Elementwise ops on bf16 tensors (mixed precision's activations) convert in their loops: exactly
// the f32 op on the widened inputs, rounded once, for contiguous same-shape operands (threaded
// sizes) and for broadcasting ones (the converting path).
TEST(Elementwise, Bf16IsTheF32OpRoundedOnce) {
  Tensor a = randn({4, 32, 32, 16}, 31).to(DType::bf16), b = randn({4, 32, 32, 16}, 32).to(DType::bf16);
  Tensor af = a.to(DType::f32), bf = b.to(DType::f32);
  auto same = [](const Tensor& got, const Tensor& f32, const char* what) {
    EXPECT_EQ(got.dtype(), DType::bf16) << what;
    EXPECT_EQ(got.to_double_vector(), f32.to(DType::bf16).to_double_vector()) << what;
  };
  same(ops::add(a, b), ops::add(af, bf), "add");
  same(ops::mul(a, b), ops::mul(af, bf), "mul");
  same(ops::div(a, b), ops::div(af, bf), "div");
  same(ops::relu(a), ops::relu(af), "relu");
  same(ops::relu_backward(a, b), ops::relu_backward(af, bf), "relu_backward");
  same(ops::exp(a), ops::exp(af), "exp");
  same(ops::mul_scalar(a, 0.3), ops::mul_scalar(af, 0.3), "mul_scalar");
  Tensor row = randn({16}, 33).to(DType::bf16);
  same(ops::add(a, row), ops::add(af, row.to(DType::f32)), "add, broadcast");
}
