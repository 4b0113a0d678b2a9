// Every public op (core/ops/*.h, the Tensor views and utilities) on a GPU against the same op on the
// CPU, through the PUBLIC API: identical inputs, forward, then backward through autograd with the
// same upstream gradient; outputs and input gradients are compared with the tolerance written at
// each case. This checks the dispatch (core/ops/dispatch.h) and each op's CUDA backward closure;
// the kernels themselves are checked against plain-loop references in the other files here.
// Convolutions run with TF32 off (set here) so f32 tolerances can be tight.
// Also: mixed CPU/GPU inputs are an error naming the op and both devices.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

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
#include "core/ops/shape_ops.h"
#include "core/rng.h"
#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible"

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct DeviceRun {
  std::vector<double> y;
  std::vector<std::vector<double>> grads;  // empty where the input takes no gradient
};

// f on copies of `inputs` moved to `d` (those with grad[i] require grad), backward with a fixed
// upstream gradient. The default generator is reseeded first, so dropout draws the same mask.
DeviceRun run_on(Device d, const Fn& f, const std::vector<Tensor>& inputs, const std::vector<bool>& grad) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      xs.push_back(Tensor());
      continue;
    }
    Tensor t = inputs[i].detach().clone().to(d);
    if (i < grad.size() && grad[i]) t.set_requires_grad(true);
    xs.push_back(t);
  }
  manual_seed(42);
  Tensor y = f(xs);
  EXPECT_EQ(y.device(), d) << "output " << y.str();
  DeviceRun r;
  r.y = y.to_double_vector();
  if (y.requires_grad()) {
    Tensor gy = rand_cpu(y.shape(), 777, y.dtype()).to(d);
    y.backward(gy);
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i < grad.size() && grad[i]) {
      Tensor g = xs[i].grad();
      EXPECT_TRUE(g.defined()) << "input " << i << " got no gradient on " << d.str();
      if (!g.defined()) {
        r.grads.emplace_back();
        continue;
      }
      EXPECT_EQ(g.device(), d) << "gradient of input " << i;
      r.grads.push_back(g.to_double_vector());
    } else {
      r.grads.emplace_back();
    }
  }
  return r;
}

// |gpu - cpu| <= atol + rtol * |cpu|, with atol relative to the largest |cpu| value of the tensor.
void expect_close_scaled(const std::vector<double>& got, const std::vector<double>& want, double rel,
                         const std::string& what) {
  double m = 0;
  for (double v : want) m = std::max(m, std::fabs(v));
  kiln::testing::expect_close(got, want, rel * std::max(m, 1e-30), rel, what);
}

void compare(const std::string& what, const Fn& f, const std::vector<Tensor>& inputs, const std::vector<bool>& grad,
             double rel) {
  SCOPED_TRACE(what);
  DeviceRun c = run_on(Device::cpu(), f, inputs, grad);
  DeviceRun g = run_on(gpu(), f, inputs, grad);
  expect_close_scaled(g.y, c.y, rel, what + " forward");
  for (size_t i = 0; i < c.grads.size(); ++i)
    if (!c.grads[i].empty()) expect_close_scaled(g.grads[i], c.grads[i], rel, what + " d/dinput" + std::to_string(i));
}

// Conv tolerances need TF32 off; restored after each test.
class OpsOnGpu : public gputest::Tf32OffTest {};

constexpr double kF32 = 1e-5;  // one op in f32, different summation orders
constexpr double kBf16 = 2e-2;

Tensor positive(const Shape& s, uint64_t seed) {
  std::vector<double> v = rand_cpu(s, seed, DType::f64).to_double_vector();
  for (double& x : v) x = 0.5 + std::fabs(x);
  return Tensor::from_vector(v, s, DType::f64).to(DType::f32);
}

}  // namespace

TEST_F(OpsOnGpu, Elementwise) {
  SKIP_WITHOUT_GPU();
  Tensor a = rand_cpu({4, 5, 3, 8}, 1), b = rand_cpu({4, 5, 3, 8}, 2), bias = rand_cpu({8}, 3);
  Tensor col = rand_cpu({4, 1, 3, 1}, 4), p = positive({4, 5, 3, 8}, 5);
  auto two = [](Tensor (*op)(const Tensor&, const Tensor&)) {
    return Fn([op](const std::vector<Tensor>& x) { return op(x[0], x[1]); });
  };
  auto one = [](Tensor (*op)(const Tensor&)) { return Fn([op](const std::vector<Tensor>& x) { return op(x[0]); }); };
  compare("add", two(ops::add), {a, b}, {true, true}, kF32);
  compare("add bias", two(ops::add), {a, bias}, {true, true}, kF32);
  compare("sub broadcast", two(ops::sub), {a, col}, {true, true}, kF32);
  compare("mul broadcast", two(ops::mul), {col, a}, {true, true}, kF32);
  compare("div", two(ops::div), {a, p}, {true, true}, kF32);
  compare("add_scalar", Fn([](const std::vector<Tensor>& x) { return ops::add_scalar(x[0], 0.75); }), {a}, {true}, kF32);
  compare("mul_scalar", Fn([](const std::vector<Tensor>& x) { return ops::mul_scalar(x[0], -1.5); }), {a}, {true}, kF32);
  compare("neg", one(ops::neg), {a}, {true}, kF32);
  compare("relu", one(ops::relu), {a}, {true}, kF32);
  compare("exp", one(ops::exp), {a}, {true}, kF32);
  compare("log", one(ops::log), {p}, {true}, kF32);
  compare("sqrt", one(ops::sqrt), {p}, {true}, kF32);
  compare("square", one(ops::square), {a}, {true}, kF32);
  compare("relu_backward", two(ops::relu_backward), {a, b}, {false, false}, 0.0);
  compare("add bf16", two(ops::add), {a.to(DType::bf16), bias.to(DType::bf16)}, {true, true}, kBf16);
  compare("mul f16", two(ops::mul), {a.to(DType::f16), b.to(DType::f16)}, {true, true}, 2e-3);

  EXPECT_TRUE(ops::all_finite(a.to(gpu())));
  std::vector<double> bad = a.to_double_vector();
  bad[17] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(ops::all_finite(Tensor::from_vector(bad, a.shape(), DType::f64).to(DType::f32).to(gpu())));
}

TEST_F(OpsOnGpu, Reductions) {
  SKIP_WITHOUT_GPU();
  Tensor x = rand_cpu({6, 7, 5, 9}, 11);
  auto sum_dims = [](std::vector<int64_t> d, bool keep) {
    return Fn([d, keep](const std::vector<Tensor>& v) { return ops::sum(v[0], d, keep); });
  };
  compare("sum NHW (bias gradient)", sum_dims({0, 1, 2}, false), {x}, {true}, kF32);
  compare("sum last", sum_dims({-1}, true), {x}, {true}, kF32);
  compare("sum middle", sum_dims({1, 3}, false), {x}, {true}, kF32);
  compare("sum all", Fn([](const std::vector<Tensor>& v) { return ops::sum(v[0]); }), {x}, {true}, kF32);
  compare("mean keepdim", Fn([](const std::vector<Tensor>& v) { return ops::mean(v[0], {0, 2}, true); }), {x}, {true},
          kF32);
  compare("mean all bf16", Fn([](const std::vector<Tensor>& v) { return ops::mean(v[0]); }), {x.to(DType::bf16)},
          {true}, kBf16);

  Tensor xg = x.to(gpu());
  EXPECT_NEAR(ops::sum_of_squares(xg), ops::sum_of_squares(x), 1e-5 * ops::sum_of_squares(x));
  EXPECT_NEAR(ops::max_abs(xg), ops::max_abs(x), 1e-7);
  Tensor logits = rand_cpu({13, 10}, 12);
  Tensor am = ops::argmax(logits.to(gpu()), 1);
  EXPECT_EQ(am.device(), gpu());
  EXPECT_EQ(am.to_int_vector(), ops::argmax(logits, 1).to_int_vector());
  Tensor tk = ops::topk_indices(logits.to(gpu()), 5);
  EXPECT_EQ(tk.device(), gpu());
  EXPECT_EQ(tk.to_int_vector(), ops::topk_indices(logits, 5).to_int_vector());
}

TEST_F(OpsOnGpu, ViewsConcatAndCopies) {
  SKIP_WITHOUT_GPU();
  Tensor a = rand_cpu({3, 4, 5, 6}, 21), b = rand_cpu({3, 2, 5, 6}, 22), w = rand_cpu({6, 5, 4, 3}, 23);
  compare("views", Fn([](const std::vector<Tensor>& v) {
            Tensor t = v[0].permute({3, 2, 1, 0});            // non-contiguous view
            t = ops::mul(t, v[1]);                            // strided operand
            t = t.transpose(0, 3).slice(1, 1, 4, 2);          // stepped slice
            return ops::relu(t.reshape({3, -1}).flatten(0));  // copy when not viewable
          }),
          {a, w}, {true, true}, kF32);
  compare("concat", Fn([](const std::vector<Tensor>& v) {
            Tensor c = ops::concat({v[0], v[1]}, 1);
            return ops::concat({c, ops::square(c)}, -1);
          }),
          {a, b}, {true, true}, kF32);
  compare("to dtype", Fn([](const std::vector<Tensor>& v) { return ops::mul(v[0].to(DType::bf16), v[0].to(DType::bf16)); }),
          {a}, {true}, kBf16);

  // Utilities the trainer and metrics use.
  Tensor z = Tensor::zeros({5, 3}, DType::f32, gpu());
  EXPECT_EQ(z.to_double_vector(), std::vector<double>(15, 0.0));
  z.fill_(2.5);
  EXPECT_DOUBLE_EQ(ops::sum(z).item(), 37.5);
  Tensor h = Tensor::empty({3, 5});
  h.copy_(z.transpose(0, 1));  // strided device -> host copy
  EXPECT_EQ(h.to_double_vector(), std::vector<double>(15, 2.5));
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{3, 1, 4}, {3}, DType::i64, gpu());
  EXPECT_EQ(labels.to_int_vector(), (std::vector<int64_t>{3, 1, 4}));
  // Gradient flows back across .to(device).
  Tensor c = rand_cpu({4}, 24);
  c.set_requires_grad(true);
  ops::sum(ops::square(c.to(gpu()))).backward();
  ASSERT_TRUE(c.grad().defined());
  EXPECT_TRUE(c.grad().device().is_cpu());
  kiln::testing::expect_close(c.grad().to_double_vector(), ops::mul_scalar(c.detach(), 2.0).to_double_vector(), 1e-6, 1e-6,
                        "grad through to(gpu)");
}

TEST_F(OpsOnGpu, Conv2d) {
  SKIP_WITHOUT_GPU();
  struct Case {
    const char* what;
    Shape x, w;
    ops::Conv2dParams p;
    bool bias;
  };
  auto P = [](int64_t s, int64_t pad, int64_t dil, int64_t g) {
    ops::Conv2dParams p;
    p.stride_h = p.stride_w = s;
    p.pad_h = p.pad_w = pad;
    p.dilation_h = p.dilation_w = dil;
    p.groups = g;
    return p;
  };
  const Case cases[] = {
      {"3x3 pad 1", {2, 9, 7, 5}, {6, 3, 3, 5}, P(1, 1, 1, 1), true},
      {"3x3 stride 2 no bias", {3, 11, 10, 4}, {8, 3, 3, 4}, P(2, 1, 1, 1), false},
      {"1x1 stride 2 on 3 channels", {2, 8, 8, 3}, {4, 1, 1, 3}, P(2, 0, 1, 1), true},
      {"dilation 2", {1, 12, 12, 3}, {5, 3, 3, 3}, P(1, 2, 2, 1), true},
      {"groups 2", {2, 6, 6, 8}, {6, 3, 3, 4}, P(1, 1, 1, 2), true},
      {"7x7 stride 2 stem", {2, 32, 32, 3}, {16, 7, 7, 3}, P(2, 3, 1, 1), false},
  };
  uint64_t seed = 30;
  for (const Case& c : cases) {
    Tensor x = rand_cpu(c.x, ++seed), w = rand_cpu(c.w, ++seed, DType::f32, 0.2);
    Tensor b = c.bias ? rand_cpu({c.w[0]}, ++seed) : Tensor();
    ops::Conv2dParams p = c.p;
    Fn f = [p](const std::vector<Tensor>& v) { return ops::conv2d(v[0], v[1], v[2], p); };
    compare(std::string("conv2d ") + c.what, f, {x, w, b}, {true, true, c.bias}, 1e-4);
    if (c.bias)
      compare(std::string("conv2d bf16 ") + c.what, f, {x.to(DType::bf16), w.to(DType::bf16), b.to(DType::bf16)},
              {true, true, true}, 3e-2);
  }
}

TEST_F(OpsOnGpu, LinearAndMatmul) {
  SKIP_WITHOUT_GPU();
  Tensor x = rand_cpu({17, 33}, 41), w = rand_cpu({9, 33}, 42, DType::f32, 0.2), b = rand_cpu({9}, 43);
  Fn lin = [](const std::vector<Tensor>& v) { return ops::linear(v[0], v[1], v[2]); };
  compare("linear", lin, {x, w, b}, {true, true, true}, 1e-5);
  compare("linear no bias", lin, {x, w, Tensor()}, {true, true, false}, 1e-5);
  compare("linear bf16", lin, {x.to(DType::bf16), w.to(DType::bf16), b.to(DType::bf16)}, {true, true, true}, 3e-2);
  Tensor a = rand_cpu({12, 20}, 44), m = rand_cpu({20, 7}, 45);
  compare("matmul", Fn([](const std::vector<Tensor>& v) { return ops::matmul(v[0], v[1]); }), {a, m}, {true, true},
          1e-5);
  compare("matmul transposed view", Fn([](const std::vector<Tensor>& v) { return ops::matmul(v[0].transpose(0, 1), v[1]); }),
          {rand_cpu({20, 12}, 46), m}, {true, true}, 1e-5);
}

TEST_F(OpsOnGpu, BatchNorm) {
  SKIP_WITHOUT_GPU();
  Tensor x = rand_cpu({4, 5, 6, 8}, 51, DType::f32, 2.0, 3.0), x2 = rand_cpu({16, 8}, 52);
  Tensor gamma = rand_cpu({8}, 53, DType::f32, 0.5, 1.0), beta = rand_cpu({8}, 54);
  Tensor rm = rand_cpu({8}, 55, DType::f32, 0.1), rv = positive({8}, 56);
  // Training updates the running statistics in place: both devices start from copies of the same.
  Tensor rm_c = rm.clone(), rv_c = rv.clone(), rm_g = rm.to(gpu()), rv_g = rv.to(gpu());
  Fn train_c = [&](const std::vector<Tensor>& v) { return ops::batch_norm(v[0], v[1], v[2], rm_c, rv_c, true, 0.1, 1e-5); };
  Fn train_g = [&](const std::vector<Tensor>& v) { return ops::batch_norm(v[0], v[1], v[2], rm_g, rv_g, true, 0.1, 1e-5); };
  {
    SCOPED_TRACE("batch_norm train NHWC");
    DeviceRun c = run_on(Device::cpu(), train_c, {x, gamma, beta}, {true, true, true});
    DeviceRun g = run_on(gpu(), train_g, {x, gamma, beta}, {true, true, true});
    expect_close_scaled(g.y, c.y, 1e-5, "y");
    for (int i = 0; i < 3; ++i) expect_close_scaled(g.grads[i], c.grads[i], 1e-4, "grad " + std::to_string(i));
    expect_close_scaled(rm_g.to_double_vector(), rm_c.to_double_vector(), 1e-5, "running_mean");
    expect_close_scaled(rv_g.to_double_vector(), rv_c.to_double_vector(), 1e-5, "running_var");
  }
  Fn eval = [&](const std::vector<Tensor>& v) { return ops::batch_norm(v[0], v[1], v[2], v[3], v[4], false, 0.1, 1e-5); };
  compare("batch_norm eval", eval, {x, gamma, beta, rm, rv}, {true, true, true, false, false}, 1e-5);
  Fn plain = [](const std::vector<Tensor>& v) { return ops::batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true); };
  compare("batch_norm (N, C), no affine, no running stats", plain, {x2}, {true}, 1e-4);
  Fn affine = [](const std::vector<Tensor>& v) { return ops::batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), true); };
  compare("batch_norm bf16", affine, {x.to(DType::bf16), gamma, beta}, {true, true, true}, 3e-2);
}

TEST_F(OpsOnGpu, Pooling) {
  SKIP_WITHOUT_GPU();
  Tensor x = rand_cpu({2, 11, 9, 6}, 61);
  ops::Pool2dParams mp;
  mp.kernel_h = mp.kernel_w = 3;
  mp.stride_h = mp.stride_w = 2;
  mp.pad_h = mp.pad_w = 1;
  compare("max_pool2d k3 s2 p1", Fn([mp](const std::vector<Tensor>& v) { return ops::max_pool2d(v[0], mp); }), {x},
          {true}, 0.0);
  ops::Pool2dParams cp;  // 2x2 stride 2, ceil mode on odd sizes
  cp.ceil_mode = true;
  compare("max_pool2d ceil", Fn([cp](const std::vector<Tensor>& v) { return ops::max_pool2d(v[0], cp); }), {x}, {true},
          kF32);
  ops::Pool2dParams ap = mp;
  ap.ceil_mode = true;
  ap.count_include_pad = false;
  compare("avg_pool2d ceil, no pad count", Fn([ap](const std::vector<Tensor>& v) { return ops::avg_pool2d(v[0], ap); }),
          {x}, {true}, kF32);
  compare("avg_pool2d", Fn([mp](const std::vector<Tensor>& v) { return ops::avg_pool2d(v[0], mp); }), {x}, {true}, kF32);
  compare("global_avg_pool", Fn([](const std::vector<Tensor>& v) { return ops::global_avg_pool(v[0]); }), {x}, {true},
          kF32);
  compare("adaptive_avg_pool2d 3x2",
          Fn([](const std::vector<Tensor>& v) { return ops::adaptive_avg_pool2d(v[0], 3, 2); }), {x}, {true}, kF32);
  compare("max_pool2d bf16", Fn([mp](const std::vector<Tensor>& v) { return ops::max_pool2d(v[0], mp); }),
          {x.to(DType::bf16)}, {true}, kBf16);
}

TEST_F(OpsOnGpu, LrnDropoutLoss) {
  SKIP_WITHOUT_GPU();
  Tensor x = rand_cpu({3, 4, 5, 7}, 71);
  for (int64_t size : {5, 4})
    compare("lrn size " + std::to_string(size),
            Fn([size](const std::vector<Tensor>& v) { return ops::local_response_norm(v[0], size, 1e-2, 0.75, 2.0); }),
            {x}, {true}, 1e-4);  // powf vs std::pow
  // The same counter-based mask on both devices (run_on reseeds the default generator).
  compare("dropout p=0.3", Fn([](const std::vector<Tensor>& v) { return ops::dropout(v[0], 0.3, true); }), {x}, {true},
          kF32);
  compare("dropout eval", Fn([](const std::vector<Tensor>& v) { return ops::mul_scalar(ops::dropout(v[0], 0.3, false), 1.0); }),
          {x}, {true}, 0.0);

  Tensor logits = rand_cpu({19, 10}, 72, DType::f32, 3.0);
  std::vector<int64_t> y;
  for (int64_t i = 0; i < 19; ++i) y.push_back((i * 7) % 10);
  Tensor labels = Tensor::from_vector(y, {19}, DType::i64);
  for (double ls : {0.0, 0.1})
    compare("cross_entropy ls=" + std::to_string(ls),
            Fn([ls](const std::vector<Tensor>& v) { return ops::cross_entropy(v[0], v[1], ls); }), {logits, labels},
            {true, false}, 1e-5);
  compare("cross_entropy i32 labels bf16 logits",
          Fn([](const std::vector<Tensor>& v) { return ops::cross_entropy(v[0], v[1]); }),
          {logits.to(DType::bf16), labels.to(DType::i32)}, {true, false}, 2e-2);
  compare("softmax", Fn([](const std::vector<Tensor>& v) { return ops::softmax(v[0]); }), {logits.reshape({19, 2, 5})},
          {false}, 1e-5);
}

TEST_F(OpsOnGpu, MixedDevicesAreAnErrorNamingTheOpAndBothDevices) {
  SKIP_WITHOUT_GPU();
  Tensor c = rand_cpu({2, 4, 4, 3}, 81), g = c.to(gpu());
  auto expect_mixed = [](const std::function<void()>& f, const std::string& op) {
    try {
      f();
      ADD_FAILURE() << op << ": no error";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(op + ": tensors on different devices"), std::string::npos) << m;
      EXPECT_NE(m.find("on cpu"), std::string::npos) << m;
      EXPECT_NE(m.find("on cuda:0"), std::string::npos) << m;
    }
  };
  expect_mixed([&] { ops::add(c, g); }, "add");
  expect_mixed([&] { ops::mul(g, c); }, "mul");
  Tensor w = rand_cpu({4, 3, 3, 3}, 82);
  expect_mixed([&] { ops::conv2d(g, w, Tensor(), {}); }, "conv2d");
  expect_mixed([&] { ops::linear(g.reshape({2, -1}), rand_cpu({5, 48}, 83), Tensor()); }, "linear");
  expect_mixed([&] { ops::batch_norm(g, rand_cpu({3}, 84), Tensor(), Tensor(), Tensor(), true); }, "batch_norm");
  Tensor labels = Tensor::zeros({2}, DType::i64);
  expect_mixed([&] { ops::cross_entropy(g.reshape({2, -1}), labels); }, "cross_entropy");
  expect_mixed([&] { ops::concat({c, g}, 0); }, "concat");
}
