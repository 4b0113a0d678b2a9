// Each layer: parameter names, shapes and initialisation; forward output shapes; train/eval
// behaviour; the residual blocks against the same computation written out with ops.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/ops/conv2d.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/reduce.h"
#include "core/rng.h"
#include "layers/activation.h"
#include "layers/blocks.h"
#include "layers/conv.h"
#include "layers/init.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/pooling.h"
#include "layers/sequential.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::randn;

namespace {
double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double std_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}
double max_abs_of(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}
Conv2dOptions conv_opts(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t pad = 0) {
  Conv2dOptions o;
  o.in_channels = in;
  o.out_channels = out;
  o.kernel_size = k;
  o.stride = stride;
  o.padding = pad;
  return o;
}
BlockOptions block_opts(int64_t in, int64_t planes, int64_t stride, const std::string& shortcut = "B") {
  BlockOptions o;
  o.in_channels = in;
  o.planes = planes;
  o.stride = stride;
  o.shortcut = shortcut;
  return o;
}
}  // namespace

TEST(Layers, Conv2dShapesAndDefaultInit) {
  manual_seed(3);
  Conv2dOptions o = conv_opts(16, 32, 3, 2, 1);
  Conv2d conv(o);
  ASSERT_EQ(conv.named_parameters().size(), 2u);
  EXPECT_EQ(conv.named_parameters()[0].first, "weight");
  EXPECT_EQ(conv.weight.shape(), (Shape{32, 3, 3, 16}));
  EXPECT_EQ(conv.bias.shape(), (Shape{32}));
  // PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = 16*9 = 144 -> bound 1/12.
  auto w = conv.weight.to_double_vector();
  EXPECT_LE(max_abs_of(w), 1.0 / 12.0);
  EXPECT_NEAR(std_of(w), (1.0 / 12.0) / std::sqrt(3.0), 0.003);
  EXPECT_LE(max_abs_of(conv.bias.to_double_vector()), 1.0 / 12.0);
  Tensor y = conv.forward(randn({2, 9, 9, 16}, 1));
  EXPECT_EQ(y.shape(), (Shape{2, 5, 5, 32}));
  EXPECT_THROW(conv.forward(randn({2, 9, 9, 8}, 1)), Error);
}

TEST(Layers, Conv2dKaimingInitGroupsAndNoBias) {
  manual_seed(4);
  Conv2dOptions o = conv_opts(8, 64, 3);
  o.init = "kaiming_normal";
  o.bias = false;
  o.groups = 2;
  Conv2d conv(o);
  EXPECT_EQ(conv.named_parameters().size(), 1u);
  EXPECT_FALSE(conv.bias.defined());
  EXPECT_EQ(conv.weight.shape(), (Shape{64, 3, 3, 4}));
  // fan_out = 64 * 9
  auto w = conv.weight.to_double_vector();
  EXPECT_NEAR(mean_of(w), 0.0, 0.01);
  EXPECT_NEAR(std_of(w), std::sqrt(2.0 / (64 * 9)), 0.004);
  EXPECT_EQ(conv.forward(randn({1, 5, 5, 8}, 2)).shape(), (Shape{1, 3, 3, 64}));
  o.groups = 3;
  EXPECT_THROW(Conv2d{o}, Error);
}

TEST(Layers, LinearMatchesReference) {
  manual_seed(5);
  LinearOptions o;
  o.in_features = 7;
  o.out_features = 3;
  Linear lin(o);
  EXPECT_EQ(lin.weight.shape(), (Shape{3, 7}));
  EXPECT_LE(max_abs_of(lin.weight.to_double_vector()), 1.0 / std::sqrt(7.0));
  Tensor x = randn({4, 7}, 6);
  Tensor y = lin.forward(x);
  auto xv = x.to_double_vector(), wv = lin.weight.to_double_vector(), bv = lin.bias.to_double_vector();
  std::vector<double> want(12);
  for (int n = 0; n < 4; ++n)
    for (int j = 0; j < 3; ++j) {
      double s = bv[j];
      for (int k = 0; k < 7; ++k) s += xv[n * 7 + k] * wv[j * 7 + k];
      want[n * 3 + j] = s;
    }
  expect_close(y, want, 1e-5, 1e-5, "linear");
  EXPECT_THROW(lin.forward(randn({4, 6}, 1)), Error);
  o.init = "normal";
  Linear lin2(o);
  EXPECT_EQ(lin2.bias.to_double_vector(), std::vector<double>(3, 0.0));
}

// forward_relu (the ResNet blocks' fused "BN, add, ReLU") keeps the layer's bookkeeping: one
// running-statistics update and one count per training call, none when a checkpoint recomputes it,
// and the values of relu(forward(x) + residual).
TEST(Layers, BatchNormForwardReluKeepsTheBookkeeping) {
  BatchNormOptions o;
  o.num_features = 3;
  BatchNorm2d fused(o), plain(o);
  Tensor x = ops::add_scalar(randn({4, 5, 5, 3}, 71), 2.0), r = randn({4, 5, 5, 3}, 72);
  Tensor y = fused.forward_relu(x, r);
  Tensor want = ops::relu(ops::add(plain.forward(x), r));
  EXPECT_EQ(y.to_double_vector(), want.to_double_vector());
  EXPECT_EQ(fused.num_batches_tracked.to_int_vector(), std::vector<int64_t>{1});
  EXPECT_EQ(fused.running_mean.to_double_vector(), plain.running_mean.to_double_vector());
  EXPECT_EQ(fused.running_var.to_double_vector(), plain.running_var.to_double_vector());
  {
    RecomputeScope recompute(true);
    EXPECT_EQ(fused.forward_relu(x, r).to_double_vector(), want.to_double_vector());
    EXPECT_EQ(fused.forward_relu(x).to_double_vector(), ops::relu(plain.forward(x)).to_double_vector())
        << "the recomputation normalises with the batch statistics, as the first run did";
  }
  EXPECT_EQ(fused.num_batches_tracked.to_int_vector(), std::vector<int64_t>{1});
  EXPECT_EQ(fused.running_mean.to_double_vector(), plain.running_mean.to_double_vector());
  fused.eval();
  plain.eval();
  EXPECT_EQ(fused.forward_relu(x).to_double_vector(), ops::relu(plain.forward(x)).to_double_vector());
  EXPECT_EQ(fused.num_batches_tracked.to_int_vector(), std::vector<int64_t>{1});
}

// A Sequential's batch norm directly followed by a ReLU runs as the fused op (run_layers): one
// "batch_norm_relu" node, the same values and gradients as the layers one by one, and a batch norm
// not followed by a ReLU (or a ReLU after something else) runs as before.
TEST(Layers, SequentialFusesBatchNormThenRelu) {
  auto build = [] {
    manual_seed(5);
    auto s = std::make_shared<Sequential>();
    Conv2dOptions c;
    c.in_channels = 3;
    c.out_channels = 4;
    c.kernel_size = 3;
    c.padding = 1;
    s->push_back(std::make_shared<Conv2d>(c));
    BatchNormOptions b;
    b.num_features = 4;
    s->push_back(std::make_shared<BatchNorm2d>(b));
    s->push_back(std::make_shared<ReLU>());
    s->push_back(std::make_shared<BatchNorm2d>(b));  // not followed by a ReLU
    return s;
  };
  auto fused = build(), plain = build();
  Tensor x = randn({2, 5, 5, 3}, 81).set_requires_grad(true);
  Tensor xp = x.detach().clone().set_requires_grad(true);
  Tensor y = fused->forward(x);
  Tensor h = xp;
  for (const auto& m : plain->layers()) h = m->forward(h);
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "batch_norm");
  EXPECT_EQ(y.to_double_vector(), h.to_double_vector());
  Tensor gy = randn({2, 5, 5, 4}, 82);
  y.backward(gy);
  h.backward(gy);
  EXPECT_EQ(x.grad().to_double_vector(), xp.grad().to_double_vector());
  for (size_t i = 0; i < 4; ++i) {
    auto pf = (*fused)[i]->named_parameters(), pp = (*plain)[i]->named_parameters();
    ASSERT_EQ(pf.size(), pp.size());
    for (size_t k = 0; k < pf.size(); ++k)
      EXPECT_EQ(pf[k].second.grad().to_double_vector(), pp[k].second.grad().to_double_vector()) << i << pf[k].first;
  }
  // The fused node is there: the output of layers 0-2 through run_layers.
  Tensor fz = run_layers({(*fused)[0], (*fused)[1], (*fused)[2]}, x.detach().set_requires_grad(true));
  ASSERT_TRUE(fz.grad_fn());
  EXPECT_EQ(fz.grad_fn()->name(), "batch_norm_relu");
}

TEST(Layers, BatchNormTrainUpdatesStatsEvalUsesThem) {
  BatchNormOptions o;
  o.num_features = 3;
  BatchNorm2d bn(o);
  EXPECT_EQ(bn.weight.to_double_vector(), std::vector<double>(3, 1.0));
  EXPECT_EQ(bn.bias.to_double_vector(), std::vector<double>(3, 0.0));
  Tensor x = ops::add_scalar(randn({4, 5, 5, 3}, 7), 2.0);
  Tensor y = bn.forward(x);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_EQ(bn.num_batches_tracked.to_int_vector(), std::vector<int64_t>{1});
  // running_mean moved 10% of the way to the batch mean (about 2).
  for (double m : bn.running_mean.to_double_vector()) EXPECT_NEAR(m, 0.2, 0.05);
  // Training output is normalised per channel.
  auto yv = y.to_double_vector();
  EXPECT_NEAR(mean_of(yv), 0.0, 1e-4);
  bn.eval();
  std::vector<double> mean = bn.running_mean.to_double_vector(), var = bn.running_var.to_double_vector();
  Tensor ye = bn.forward(x);
  EXPECT_EQ(bn.num_batches_tracked.to_int_vector(), std::vector<int64_t>{1});
  EXPECT_EQ(bn.running_mean.to_double_vector(), mean);
  auto xv = x.to_double_vector();
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = (xv[i] - mean[i % 3]) / std::sqrt(var[i % 3] + 1e-5);
  expect_close(ye, want, 1e-4, 1e-4, "batch_norm eval");
  // (N, C) features (batch_norm1d).
  EXPECT_EQ(bn.forward(randn({6, 3}, 8)).shape(), (Shape{6, 3}));
  EXPECT_THROW(bn.forward(randn({6, 4}, 8)), Error);
}

TEST(Layers, PoolingShapes) {
  Tensor x = randn({2, 9, 9, 4}, 9);
  Pool2dOptions p;
  p.kernel_size = 3;
  p.stride = 2;
  EXPECT_EQ(MaxPool2d(p).forward(x).shape(), (Shape{2, 4, 4, 4}));
  Tensor x10 = randn({1, 10, 10, 4}, 9);
  EXPECT_EQ(MaxPool2d(p).forward(x10).shape(), (Shape{1, 4, 4, 4}));
  p.ceil_mode = true;
  EXPECT_EQ(MaxPool2d(p).forward(x10).shape(), (Shape{1, 5, 5, 4}));
  Pool2dOptions q;
  q.kernel_size = 2;  // stride defaults to the kernel
  EXPECT_EQ(AvgPool2d(q).forward(x).shape(), (Shape{2, 4, 4, 4}));
  EXPECT_EQ(AdaptiveAvgPool2d(AdaptiveAvgPool2dOptions{3}).forward(x).shape(), (Shape{2, 3, 3, 4}));
  Tensor g = GlobalAvgPool().forward(x);
  EXPECT_EQ(g.shape(), (Shape{2, 4}));
  auto xv = x.to_double_vector();
  double s = 0;
  for (int i = 0; i < 81; ++i) s += xv[i * 4 + 1];
  EXPECT_NEAR(g.to_double_vector()[1], s / 81, 1e-5);
  Pool2dOptions bad;
  bad.kernel_size = 2;
  bad.padding = 2;
  EXPECT_THROW(MaxPool2d{bad}, Error);
}

TEST(Layers, DropoutOnlyInTraining) {
  Dropout d(DropoutOptions{0.5});
  Tensor x = Tensor::ones({1000});
  auto v = d.forward(x).to_double_vector();
  int zeros = 0;
  for (double e : v) {
    EXPECT_TRUE(e == 0.0 || std::fabs(e - 2.0) < 1e-6);
    zeros += e == 0.0;
  }
  EXPECT_GT(zeros, 400);
  EXPECT_LT(zeros, 600);
  d.eval();
  EXPECT_EQ(d.forward(x).to_double_vector(), std::vector<double>(1000, 1.0));
  EXPECT_THROW(Dropout(DropoutOptions{1.0}), Error);
}

TEST(Layers, ReluLrnFlatten) {
  Tensor x = randn({2, 3, 3, 5}, 10);
  auto r = ReLU().forward(x).to_double_vector();
  for (double e : r) EXPECT_GE(e, 0.0);
  LocalResponseNormOptions lo;
  lo.size = 3;
  EXPECT_EQ(LocalResponseNorm(lo).forward(x).shape(), x.shape());
  Flatten f;
  Tensor y = f.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 45}));
  // (c, h, w) order, as torch.flatten of the NCHW tensor
  EXPECT_EQ(y.to_double_vector(), x.permute({0, 3, 1, 2}).contiguous().to_double_vector());
  EXPECT_EQ(f.forward(y).shape(), (Shape{2, 45}));
  // One channel or one position: the same order either way.
  Tensor one_c = randn({2, 3, 3, 1}, 11), one_hw = randn({2, 1, 1, 5}, 12);
  EXPECT_EQ(f.forward(one_c).to_double_vector(), one_c.to_double_vector());
  EXPECT_EQ(f.forward(one_hw).to_double_vector(), one_hw.to_double_vector());
  EXPECT_THROW(f.forward(randn({2, 3, 5}, 13)), Error);
}

TEST(Layers, FlattenLinearEqualsAReferenceInChwColumnOrder) {
  // (N, H, W, C) = (2, 3, 4, 5) -> flatten 60 -> linear 7: weight column c*H*W + h*W + w
  // multiplies x[n][h][w][c], as in PyTorch's NCHW torch.flatten + nn.Linear.
  manual_seed(31);
  const int64_t N = 2, H = 3, W = 4, C = 5, O = 7;
  Tensor x = randn({N, H, W, C}, 14);
  Flatten flat;
  Linear lin(LinearOptions{H * W * C, O});
  Tensor y = lin.forward(flat.forward(x));
  ASSERT_EQ(y.shape(), (Shape{N, O}));
  auto xv = x.to_double_vector(), wv = lin.weight.to_double_vector(), bv = lin.bias.to_double_vector();
  std::vector<double> want;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      double acc = bv[o];
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w)
            acc += wv[o * H * W * C + (c * H + h) * W + w] * xv[((n * H + h) * W + w) * C + c];
      want.push_back(acc);
    }
  expect_close(y, want, 1e-5, 1e-5, "flatten + linear vs (c, h, w) reference");
}

TEST(Layers, FlattenGradients) {
  // Through the flatten into the linear (f32: linear's dtypes) and back to an NHWC input, numeric vs analytic.
  Tensor x = randn({2, 3, 2, 4}, 15).set_requires_grad(true);
  Tensor w = randn({5, 24}, 16).set_requires_grad(true);
  Tensor b = randn({5}, 17).set_requires_grad(true);
  auto flat = std::make_shared<Flatten>();
  kiln::testing::gradcheck([flat](const std::vector<Tensor>& v) { return ops::linear(flat->forward(v[0]), v[1], v[2]); },
                           {x, w, b}, "flatten + linear");
  // A strided (non-contiguous) input, and a flatten whose output is used elementwise (f64).
  Tensor base = randn({2, 4, 3, 2}, 18, DType::f64).set_requires_grad(true);
  kiln::testing::gradcheck([flat](const std::vector<Tensor>& v) { return ops::relu(flat->forward(v[0].transpose(1, 3))); },
                           {base}, "flatten of a transposed input");
  // The gradient that reaches the layer before is a plain NHWC tensor.
  Tensor x2 = randn({2, 3, 2, 4}, 19).set_requires_grad(true);
  Tensor y = flat->forward(x2);
  Tensor g = randn(y.shape(), 20);
  y.backward(g);
  ASSERT_TRUE(x2.grad().defined());
  EXPECT_EQ(x2.grad().shape(), x2.shape());
  EXPECT_TRUE(x2.grad().is_contiguous());
  EXPECT_EQ(x2.grad().permute({0, 3, 1, 2}).contiguous().to_double_vector(), g.to_double_vector());
}

TEST(Layers, BasicBlockNamesAndShortcuts) {
  BlockOptions o = block_opts(4, 8, 2);
  BasicBlock b(o);
  std::vector<std::string> names;
  for (auto& kv : b.named_parameters()) names.push_back(kv.first + shape_str(kv.second.shape()));
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight[8, 3, 3, 4]", "bn1.weight[8]", "bn1.bias[8]",
                                             "conv2.weight[8, 3, 3, 8]", "bn2.weight[8]", "bn2.bias[8]",
                                             "downsample.0.weight[8, 1, 1, 4]", "downsample.1.weight[8]",
                                             "downsample.1.bias[8]"}));
  EXPECT_EQ(b.forward(randn({2, 7, 7, 4}, 11)).shape(), (Shape{2, 4, 4, 8}));
  o.stride = 1;
  o.in_channels = 8;
  EXPECT_EQ(BasicBlock(o).named_parameters().size(), 6u);  // identity shortcut
}

TEST(Layers, ShortcutAMatchesHandComputation) {
  manual_seed(12);
  BlockOptions o = block_opts(2, 6, 2, "A");
  BasicBlock b(o);
  EXPECT_EQ(b.named_parameters().size(), 6u);  // no downsample parameters
  Tensor x = randn({1, 4, 4, 2}, 13);
  b.eval();
  Tensor y = b.forward(x);
  ASSERT_EQ(y.shape(), (Shape{1, 2, 2, 6}));
  // residual branch by hand, then + [0, 0, x[::2, ::2], 0, 0] per pixel, relu.
  ops::Conv2dParams p1;
  p1.stride_h = p1.stride_w = 2;
  p1.pad_h = p1.pad_w = 1;
  ops::Conv2dParams p2;
  p2.pad_h = p2.pad_w = 1;
  Tensor r = ops::relu(b.bn1->forward(ops::conv2d(x, b.conv1->weight, Tensor(), p1)));
  r = b.bn2->forward(ops::conv2d(r, b.conv2->weight, Tensor(), p2));
  auto rv = r.to_double_vector(), xv = x.to_double_vector();
  std::vector<double> want(rv.size());
  for (int h = 0; h < 2; ++h)
    for (int w = 0; w < 2; ++w)
      for (int c = 0; c < 6; ++c) {
        int i = (h * 2 + w) * 6 + c;
        double id = (c >= 2 && c < 4) ? xv[((2 * h) * 4 + 2 * w) * 2 + (c - 2)] : 0.0;
        want[i] = std::max(0.0, rv[i] + id);
      }
  expect_close(y, want, 1e-5, 1e-5, "shortcut A");
  o.shortcut = "C";
  EXPECT_THROW(BasicBlock{o}, Error);
}

// Squeeze-and-excitation (SE-ResNet): the gate sigmoid(fc2(relu(fc1(mean over H, W)))) scales each
// sample's channels.
TEST(Layers, SqueezeExciteMatchesHandComputation) {
  manual_seed(21);
  SqueezeExcite se(4, 2);  // 4 channels -> 2 hidden -> 4
  EXPECT_EQ(se.fc1->weight.shape(), (Shape{2, 4}));
  EXPECT_EQ(se.fc2->weight.shape(), (Shape{4, 2}));
  Tensor x = randn({2, 3, 3, 4}, 22);
  NoGradGuard ng;
  Tensor y = se.forward(x);
  const auto xv = x.to_double_vector(), w1 = se.fc1->weight.to_double_vector(), b1 = se.fc1->bias.to_double_vector(),
             w2 = se.fc2->weight.to_double_vector(), b2 = se.fc2->bias.to_double_vector();
  std::vector<double> want(xv.size());
  for (int n = 0; n < 2; ++n) {
    double mean[4] = {0, 0, 0, 0}, hidden[2], gate[4];
    for (int p = 0; p < 9; ++p)
      for (int c = 0; c < 4; ++c) mean[c] += xv[static_cast<size_t>((n * 9 + p) * 4 + c)] / 9.0;
    for (int j = 0; j < 2; ++j) {
      hidden[j] = b1[j];
      for (int c = 0; c < 4; ++c) hidden[j] += w1[static_cast<size_t>(j * 4 + c)] * mean[c];
      hidden[j] = std::max(0.0, hidden[j]);
    }
    for (int c = 0; c < 4; ++c) {
      double z = b2[c];
      for (int j = 0; j < 2; ++j) z += w2[static_cast<size_t>(c * 2 + j)] * hidden[j];
      gate[c] = 1.0 / (1.0 + std::exp(-z));
    }
    for (int p = 0; p < 9; ++p)
      for (int c = 0; c < 4; ++c) {
        const size_t i = static_cast<size_t>((n * 9 + p) * 4 + c);
        want[i] = xv[i] * gate[c];
      }
  }
  expect_close(y, want, 1e-6, 1e-5, "squeeze-excite");
  EXPECT_THROW(SqueezeExcite(4, 0), Error);
}

TEST(Layers, SqueezeExciteGradientsMatchFiniteDifferences) {
  manual_seed(23);
  SqueezeExcite se(6, 3);
  // The input, fc1's weight and fc2's bias as the checked inputs (the module reads its members).
  auto f = [&se](const std::vector<Tensor>& v) {
    se.fc1->weight = v[1];
    se.fc2->bias = v[2];
    return se.forward(v[0]);
  };
  kiln::testing::gradcheck(f, {randn({2, 3, 2, 6}, 24).set_requires_grad(true),
                               randn({2, 6}, 25, DType::f32, 0.5).set_requires_grad(true),
                               randn({6}, 26).set_requires_grad(true)},
                           "squeeze-excite: x, fc1.weight, fc2.bias");
}

// The gate's sigmoid stays finite, and so does its gradient, however large the pre-activation.
TEST(Layers, SigmoidIsFiniteAtTheExtremes) {
  const std::vector<double> z = {-1000, -40, -5, -0.5, 0, 0.5, 5, 40, 1000};
  Tensor t = Tensor::from_vector(std::vector<float>(z.begin(), z.end()), {9}).set_requires_grad(true);
  Tensor s = kiln::sigmoid(t);
  ops::sum(s).backward();
  const auto sv = s.to_double_vector(), g = t.grad().to_double_vector();
  for (size_t i = 0; i < z.size(); ++i) {
    const double want = 1.0 / (1.0 + std::exp(-z[i]));
    EXPECT_NEAR(sv[i], want, 1e-6) << z[i];
    ASSERT_TRUE(std::isfinite(g[i])) << z[i];
    if (std::fabs(z[i]) <= 5) EXPECT_NEAR(g[i], want * (1 - want), 1e-6) << z[i];
    if (std::fabs(z[i]) > 30) EXPECT_EQ(g[i], 0.0) << z[i];
  }
}

TEST(Layers, BlockWithSqueezeExciteGatesTheResidualBranch) {
  manual_seed(27);
  BlockOptions o = block_opts(4, 8, 2);
  o.se_reduction = 4;
  BasicBlock b(o);
  std::vector<std::string> names;
  for (auto& kv : b.named_parameters()) names.push_back(kv.first + shape_str(kv.second.shape()));
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight[8, 3, 3, 4]", "bn1.weight[8]", "bn1.bias[8]",
                                             "conv2.weight[8, 3, 3, 8]", "bn2.weight[8]", "bn2.bias[8]",
                                             "se.fc1.weight[2, 8]", "se.fc1.bias[2]", "se.fc2.weight[8, 2]",
                                             "se.fc2.bias[8]", "downsample.0.weight[8, 1, 1, 4]",
                                             "downsample.1.weight[8]", "downsample.1.bias[8]"}));
  b.eval();
  NoGradGuard ng;
  Tensor x = randn({2, 5, 5, 4}, 28);
  Tensor branch = b.bn2->forward(b.conv2->forward(b.bn1->forward_relu(b.conv1->forward(x))));
  Tensor want = ops::relu(ops::add(b.se->forward(branch), b.submodule("downsample").forward(x)));
  expect_close(b.forward(x), want.to_double_vector(), 1e-6, 1e-6, "block with squeeze-excite");
  EXPECT_EQ(b.to_json()["se_reduction"], 4);
  EXPECT_FALSE(BasicBlock(block_opts(4, 8, 2)).to_json().contains("se_reduction"));  // the JSON from before the key
  EXPECT_EQ(BlockOptions::from_json(b.to_json(), "b", "basic_block").se_reduction, 4);
  json bad = b.to_json();
  bad["se_reduction"] = -1;
  EXPECT_THROW(BlockOptions::from_json(bad, "b", "basic_block"), Error);
}

TEST(Layers, BottleneckIsV15) {
  BlockOptions o = block_opts(16, 4, 2);
  Bottleneck b(o);
  EXPECT_EQ(b.out_channels(), 16);
  EXPECT_EQ(b.conv1->options().stride, 1);
  EXPECT_EQ(b.conv2->options().stride, 2);  // the stride on the 3x3
  EXPECT_EQ(b.conv3->weight.shape(), (Shape{16, 1, 1, 4}));
  EXPECT_EQ(b.submodule("downsample.0").type(), "conv2d");
  EXPECT_EQ(b.forward(randn({1, 6, 6, 16}, 14)).shape(), (Shape{1, 3, 3, 16}));
  o.zero_init_residual = true;
  Bottleneck z(o);
  EXPECT_EQ(z.bn3->weight.to_double_vector(), std::vector<double>(16, 0.0));
  o.shortcut = "A";
  EXPECT_THROW(Bottleneck{o}, Error);
}

TEST(Layers, BlockGradientsFlowToEveryParameter) {
  BlockOptions o = block_opts(3, 2, 2);
  Bottleneck b(o);
  Tensor x = randn({2, 5, 5, 3}, 15).set_requires_grad(true);
  ops::sum(ops::square(b.forward(x))).backward();
  EXPECT_TRUE(x.grad().defined());
  for (auto& [name, p] : b.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(Layers, SkipInitGivesZerosAndDrawsNothing) {
  manual_seed(16);
  RngState before = default_generator().state();
  {
    init::SkipInitGuard skip;
    Conv2d conv(conv_opts(3, 4, 3));
    EXPECT_EQ(conv.weight.to_double_vector(), std::vector<double>(4 * 27, 0.0));
    EXPECT_EQ(conv.bias.to_double_vector(), std::vector<double>(4, 0.0));
  }
  EXPECT_EQ(default_generator().state().offset, before.offset);
  Conv2d conv(conv_opts(3, 4, 3));
  EXPECT_NE(default_generator().state().offset, before.offset);
}

// Mixed precision: a bf16 input makes Conv2d and Linear compute in bf16 with their f32 weights cast
// for the forward; the gradients land on the f32 parameters, in f32, close to the fp32 ones.
TEST(Layers, LowPrecisionInputKeepsF32MasterWeights) {
  for (DType low : {DType::bf16, DType::f16}) {
    manual_seed(5);
    Conv2d conv(conv_opts(4, 6, 3, 1, 1));
    LinearOptions lo;
    lo.in_features = 6 * 5 * 5;
    lo.out_features = 3;
    Linear fc(lo);
    Tensor x = randn({2, 5, 5, 4}, 9);
    auto run = [&](DType t) {
      conv.zero_grad();
      fc.zero_grad();
      Tensor y = fc.forward(conv.forward(x.to(t)).flatten(1));
      EXPECT_EQ(y.dtype(), t);
      ops::sum(ops::square(y.to(DType::f32))).backward();
      std::vector<std::vector<double>> g;
      for (const Tensor& p : {conv.weight, conv.bias, fc.weight, fc.bias}) {
        EXPECT_EQ(p.dtype(), DType::f32);
        EXPECT_EQ(p.grad().dtype(), DType::f32);
        g.push_back(p.grad().to_double_vector());
      }
      return g;
    };
    auto want = run(DType::f32), got = run(low);
    for (size_t i = 0; i < want.size(); ++i) {
      double scale = max_abs_of(want[i]);
      expect_close(got[i], want[i], 0.03 * scale, 0.03, "parameter " + std::to_string(i) + " in " + dtype_name(low));
    }
  }
}
