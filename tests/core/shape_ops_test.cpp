// ops::concat on the CPU (core/ops/shape_ops.h): values along a middle and the last dim (negative
// dim), the gradient split back to each input, and mismatched shapes refused by name. (The CUDA
// path is compared against this one in tests/gpu/ops_dispatch_test.cpp.)
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/ops/shape_ops.h"
#include "tests/expect_error.h"

using namespace kiln;

TEST(Concat, ValuesAlongAnyDim) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector(std::vector<float>{7, 8, 9, 10}, {2, 2});
  EXPECT_EQ(ops::concat({a, b}, 1).to_double_vector(), (std::vector<double>{1, 2, 3, 7, 8, 4, 5, 6, 9, 10}));
  EXPECT_EQ(ops::concat({a, b}, -1).shape(), (Shape{2, 5}));
  Tensor c = Tensor::from_vector(std::vector<float>{0, -1, -2}, {1, 3});
  EXPECT_EQ(ops::concat({a, c}, 0).to_double_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6, 0, -1, -2}));
  // A (N, H, W, C) activation padded with zero channels, as the ResNet shortcut (option A) does.
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {1, 2, 1, 2});
  Tensor z = Tensor::zeros({1, 2, 1, 1});
  EXPECT_EQ(ops::concat({z, x, z}, 3).to_double_vector(), (std::vector<double>{0, 1, 2, 0, 0, 3, 4, 0}));
}

TEST(Concat, GradientGoesBackToEachInput) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector(std::vector<float>{5, 6}, {2, 1});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor w = Tensor::from_vector(std::vector<float>{1, 10, 100, 2, 20, 200}, {2, 3});
  ops::sum(ops::mul(ops::concat({a, b}, 1), w)).backward();
  EXPECT_EQ(a.grad().to_double_vector(), (std::vector<double>{1, 10, 2, 20}));
  EXPECT_EQ(b.grad().to_double_vector(), (std::vector<double>{100, 200}));
}

TEST(Concat, MismatchedShapesAreRefused) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2});
  EXPECT_THROW(ops::concat({a, b}, 1), Error);
  EXPECT_THROW(ops::concat({a, a}, 2), Error);
  EXPECT_THROW(ops::concat({}, 0), Error);
}
