// NaN through every CPU op: where PyTorch gives NaN, kiln gives NaN, so a diverged weight or
// activation reaches the trainer's non-finite-loss check instead of being turned into numbers
// (relu(NaN) = 0 and max-style comparisons were the traps). The expectations are PyTorch's:
// relu(NaN) = NaN and its gradient passes (threshold_backward), max_pool2d/argmax/topk treat NaN as
// the maximum, dropout multiplies by its mask (a dropped NaN stays NaN), batch-norm, LRN, pooling,
// conv, linear, softmax and the loss spread NaN arithmetically.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops/batch_norm.h"
#include "core/ops/conv2d.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/loss.h"
#include "core/ops/lrn.h"
#include "core/ops/pool.h"
#include "core/ops/reduce.h"
#include "core/rng.h"

using namespace kiln;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor tensor(const std::vector<double>& v, const Shape& shape, DType dt = DType::f32) {
  return Tensor::from_vector(v, shape, DType::f64).to(dt);
}

std::vector<bool> nan_mask(const Tensor& t) {
  std::vector<bool> m;
  for (double v : t.to_double_vector()) m.push_back(std::isnan(v));
  return m;
}

int count_nan(const Tensor& t) {
  int n = 0;
  for (bool b : nan_mask(t)) n += b;
  return n;
}

// (1, 4, 4, C) with a NaN at pixel (1, 1), channel 0; everything else finite.
Tensor image_with_nan(int64_t C, DType dt) {
  std::vector<double> v(16 * C);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.7 * static_cast<double>(i)) * 2.0;
  v[(1 * 4 + 1) * C + 0] = kNaN;
  return tensor(v, {1, 4, 4, C}, dt);
}

}  // namespace

class NanThroughOps : public ::testing::TestWithParam<DType> {};

TEST_P(NanThroughOps, ReluKeepsNanAndPassesItsGradient) {
  Tensor x = tensor({kNaN, -1.0, 2.0, -0.0}, {4}, GetParam()).set_requires_grad(true);
  Tensor y = ops::relu(x);
  EXPECT_EQ(nan_mask(y), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(y.to_double_vector()[1], 0.0);
  EXPECT_EQ(y.to_double_vector()[2], 2.0);
  ops::sum(y).backward();
  std::vector<double> g = x.grad().to_double_vector();
  EXPECT_EQ(g, (std::vector<double>{1.0, 0.0, 1.0, 0.0}));  // PyTorch: grad passes where the output is NaN
}

TEST_P(NanThroughOps, MaxPoolTakesNanAsTheMaximum) {
  Tensor x = image_with_nan(2, GetParam()).set_requires_grad(true);
  ops::Pool2dParams p;  // 2x2, stride 2
  Tensor y = ops::max_pool2d(x, p);
  // Output (0, 0) covers pixel (1, 1): channel 0 is NaN, channel 1 and the other windows are not.
  std::vector<bool> m = nan_mask(y);
  EXPECT_TRUE(m[0]);
  EXPECT_EQ(count_nan(y), 1);
  ops::sum(y).backward();
  // The gradient goes to the NaN's position (the argmax), once.
  std::vector<double> g = x.grad().to_double_vector();
  EXPECT_EQ(g[(1 * 4 + 1) * 2 + 0], 1.0);
  EXPECT_EQ(g[0], 0.0);
  // Overlapping windows with padding and a NaN that is not the first element of its window.
  ops::Pool2dParams q;
  q.kernel_h = q.kernel_w = 3;
  q.stride_h = q.stride_w = 1;
  q.pad_h = q.pad_w = 1;
  Tensor z = ops::max_pool2d(image_with_nan(1, GetParam()), q);
  EXPECT_EQ(count_nan(z), 9);  // every window that holds pixel (1, 1)
}

TEST_P(NanThroughOps, AveragePoolsSpreadNan) {
  ops::Pool2dParams p;
  EXPECT_EQ(count_nan(ops::avg_pool2d(image_with_nan(2, GetParam()), p)), 1);
  EXPECT_EQ(count_nan(ops::adaptive_avg_pool2d(image_with_nan(2, GetParam()), 2, 2)), 1);
  Tensor g = ops::global_avg_pool(image_with_nan(2, GetParam()));
  EXPECT_EQ(nan_mask(g), (std::vector<bool>{true, false}));
}

TEST_P(NanThroughOps, DroppedNanStaysNan) {
  default_generator().set_state({7, 0});
  std::vector<double> v(64, kNaN);
  Tensor x = tensor(v, {64}, GetParam()).set_requires_grad(true);
  Tensor y = ops::dropout(x, 0.5, /*training=*/true);
  EXPECT_EQ(count_nan(y), 64);  // PyTorch: x * mask / (1 - p), and NaN * 0 = NaN
  // Finite inputs: dropped ones are exactly 0 (the multiply by 0 keeps the mask visible).
  Tensor f = ops::dropout(Tensor::ones({64}, GetParam()), 0.5, true);
  int zeros = 0;
  for (double a : f.to_double_vector()) zeros += a == 0.0;
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, 64);
  // The backward applies the same multiply to the gradient.
  (void)ops::sum(ops::dropout(x, 0.5, true)).backward();
  EXPECT_EQ(count_nan(x.grad()), 0);  // a gradient of ones times the mask: finite
}

TEST_P(NanThroughOps, LrnSpreadsNanOverItsWindow) {
  // One pixel, 5 channels, NaN in channel 2; size 3: channels 1..3 see it.
  Tensor x = tensor({0.5, -1.0, kNaN, 2.0, 0.25}, {1, 1, 1, 5}, GetParam());
  Tensor y = ops::local_response_norm(x, 3);
  EXPECT_EQ(nan_mask(y), (std::vector<bool>{false, true, true, true, false}));
}

TEST_P(NanThroughOps, BatchNormTrainingMakesTheChannelAndItsRunningStatsNan) {
  Tensor x = image_with_nan(3, GetParam());
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  Tensor y = ops::batch_norm(x, Tensor::ones({3}), Tensor::zeros({3}), rm, rv, /*training=*/true);
  std::vector<bool> m = nan_mask(y);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i], i % 3 == 0) << i;
  EXPECT_EQ(nan_mask(rm), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(nan_mask(rv), (std::vector<bool>{true, false, false}));
  // Eval with a NaN running variance: the whole channel is NaN.
  Tensor e = ops::batch_norm(Tensor::ones({1, 4, 4, 3}, GetParam()), Tensor(), Tensor(), rm, rv, /*training=*/false);
  m = nan_mask(e);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i], i % 3 == 0) << i;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NanThroughOps, ::testing::Values(DType::f32, DType::f64, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(NanThroughOps, ConvAndLinearSpreadNan) {
  Tensor x = image_with_nan(2, DType::f32);
  Tensor w = tensor(std::vector<double>(3 * 3 * 3 * 2, 0.1), {3, 3, 3, 2});  // (out, kh, kw, in)
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  Tensor y = ops::conv2d(x, w, Tensor(), p);
  EXPECT_EQ(count_nan(y), 9 * 3);  // the 3x3 outputs around (1, 1), every output channel
  Tensor w2 = w.clone();
  w2.data<float>()[0] = NAN;
  // A NaN weight (output channel 0) makes that channel NaN wherever its tap meets the image, even
  // where the input is 0 (how padding is treated differs between PyTorch's backends, so not there).
  std::vector<bool> m = nan_mask(ops::conv2d(Tensor::zeros({1, 4, 4, 2}), w2, Tensor(), p));
  int ch0 = 0, others = 0;
  for (size_t i = 0; i < m.size(); ++i) (i % 3 == 0 ? ch0 : others) += m[i];
  EXPECT_GE(ch0, 9);
  EXPECT_EQ(others, 0);
  Tensor l = ops::linear(tensor({1.0, kNaN}, {1, 2}), tensor({1, 0, 0, 1, 0, 0}, {3, 2}), Tensor());
  EXPECT_EQ(count_nan(l), 3);  // 0 * NaN = NaN: no shortcut for zero weights
}

TEST(NanThroughOps, LossSoftmaxAndReductions) {
  Tensor logits = tensor({1.0, kNaN, 0.5, 0.2, 0.1, 0.3}, {2, 3});
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 2}, {2});
  EXPECT_TRUE(std::isnan(ops::cross_entropy(logits, labels).item()));
  EXPECT_TRUE(std::isnan(ops::cross_entropy(tensor({kNaN, 1.0}, {1, 2}), Tensor::from_vector(std::vector<int64_t>{1}, {1})).item()));
  EXPECT_EQ(nan_mask(ops::softmax(logits)), (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_TRUE(std::isnan(ops::sum(logits).item()));
  EXPECT_TRUE(std::isnan(ops::mean(logits).item()));
  EXPECT_FALSE(ops::all_finite(logits));
  EXPECT_TRUE(std::isnan(ops::max_abs(tensor({5.0, kNaN, -7.0}, {3}))));
  EXPECT_TRUE(std::isnan(ops::sum_of_squares(logits)));
  // argmax/topk: NaN is the largest (PyTorch), the first NaN on ties.
  Tensor s = tensor({1.0, kNaN, 3.0, kNaN, 2.0, 0.0}, {2, 3});
  EXPECT_EQ(ops::argmax(s, 1).to_int_vector(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ops::argmax(tensor({kNaN, 5.0}, {2}), 0).to_int_vector(), (std::vector<int64_t>{0}));
  EXPECT_EQ(ops::topk_indices(s, 2).to_int_vector(), (std::vector<int64_t>{1, 2, 0, 1}));
  for (const Tensor& t : {ops::add(logits, logits), ops::mul_scalar(logits, 0.0), ops::exp(logits), ops::square(logits)})
    EXPECT_TRUE(std::isnan(t.to_double_vector()[1]));
}
