// conv2d (core/ops/conv2d.cpp, core/cpu/conv2d.cpp): forward, input/weight/bias gradients against a double-precision
// loop reference, finite differences, bf16/f16 against f32, strided inputs, the primitive cache
// under threads, and the error messages.
#include "core/ops/conv2d.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/autograd.h"
#include "core/cpu/winograd.h"
#include "core/dnnl_context.h"
#include "tests/expect_error.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::expect_error;
using kiln::testing::randn;

namespace {

struct Case {
  const char* name;
  int64_t n, h, w, c, oc, kh, kw;
  ops::Conv2dParams p;
  bool bias;
};

ops::Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1,
                         int64_t g = 1) {
  ops::Conv2dParams p;
  p.stride_h = sh, p.stride_w = sw, p.pad_h = ph, p.pad_w = pw, p.dilation_h = dh, p.dilation_w = dw, p.groups = g;
  return p;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"3x3_pad1", 2, 5, 7, 3, 4, 3, 3, params(1, 1, 1, 1), true},
      {"stride2_odd", 1, 9, 8, 5, 6, 3, 3, params(2, 2, 1, 1), true},
      {"stride2_floor", 2, 6, 7, 3, 5, 3, 3, params(2, 2, 0, 0), false},  // the last row/col is never used
      {"rect_kernel", 2, 7, 6, 4, 3, 3, 2, params(2, 1, 1, 0), true},
      {"dilation2", 2, 9, 9, 3, 5, 3, 3, params(1, 1, 2, 2, 2, 2), true},
      {"dilation_stride", 1, 11, 10, 2, 3, 3, 3, params(2, 3, 1, 2, 2, 1), false},
      {"groups2", 2, 6, 5, 4, 6, 3, 3, params(1, 1, 1, 1, 1, 1, 2), true},
      {"groups3_stride2", 1, 7, 7, 6, 9, 3, 3, params(2, 2, 1, 1, 1, 1, 3), false},
      {"depthwise", 2, 7, 6, 8, 8, 3, 3, params(1, 1, 1, 1, 1, 1, 8), true},
      {"depthwise_s2_mult2", 1, 9, 9, 4, 8, 3, 3, params(2, 2, 1, 1, 1, 1, 4), true},
      {"1x1", 3, 4, 5, 16, 8, 1, 1, params(1, 1, 0, 0), false},
      {"1x1_stride2", 2, 7, 5, 8, 12, 1, 1, params(2, 2, 0, 0), true},
      {"batch1_wide", 1, 8, 8, 32, 20, 3, 3, params(1, 1, 1, 1), true},
      {"kernel_is_input", 2, 5, 5, 3, 4, 5, 5, params(1, 1, 0, 0), true},
      {"7x7_stem", 1, 13, 12, 3, 8, 7, 7, params(2, 2, 3, 3), false},
      // 64+ channels with a 3x3 kernel: the backward runs in oneDNN's blocked layout.
      {"blocked_bwd", 2, 6, 5, 64, 72, 3, 3, params(1, 1, 1, 1), true},
      {"blocked_bwd_stride2", 1, 7, 7, 64, 64, 3, 3, params(2, 2, 1, 1), false},
      // Over 1 MFLOP, so oneDNN runs them on all threads (smaller ones run serially).
      {"parallel_groups2", 4, 12, 12, 32, 32, 3, 3, params(1, 1, 1, 1, 1, 1, 2), true},
      {"parallel_depthwise", 4, 16, 16, 64, 64, 3, 3, params(1, 1, 1, 1, 1, 1, 64), true},
      {"parallel_1x1_stride2", 4, 16, 16, 64, 96, 1, 1, params(2, 2, 0, 0), true},
  };
  return c;
}

const Case& find_case(const std::string& name) {
  for (const Case& c : cases())
    if (name == c.name) return c;
  throw std::runtime_error("no conv2d test case " + name);
}

struct Ref {
  std::vector<double> y, gx, gw, gb;
};

// Direct convolution and its three gradients, in double.
Ref reference(const Case& k, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
              const std::vector<double>& gy, int64_t oh, int64_t ow) {
  const auto& p = k.p;
  int64_t cg = k.c / p.groups, og = k.oc / p.groups;
  Ref r;
  r.y.assign(k.n * oh * ow * k.oc, 0.0);
  r.gx.assign(x.size(), 0.0);
  r.gw.assign(w.size(), 0.0);
  r.gb.assign(k.oc, 0.0);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        for (int64_t o = 0; o < k.oc; ++o) {
          int64_t yi = ((n * oh + i) * ow + j) * k.oc + o;
          int64_t g = o / og;
          double acc = k.bias ? b[o] : 0.0;
          double d = gy.empty() ? 0.0 : gy[yi];
          for (int64_t a = 0; a < k.kh; ++a)
            for (int64_t bb = 0; bb < k.kw; ++bb) {
              int64_t ih = i * p.stride_h - p.pad_h + a * p.dilation_h;
              int64_t iw = j * p.stride_w - p.pad_w + bb * p.dilation_w;
              if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
              for (int64_t c = 0; c < cg; ++c) {
                int64_t xi = ((n * k.h + ih) * k.w + iw) * k.c + g * cg + c;
                int64_t wi = ((o * k.kh + a) * k.kw + bb) * cg + c;
                acc += x[xi] * w[wi];
                r.gx[xi] += d * w[wi];
                r.gw[wi] += d * x[xi];
              }
            }
          r.y[yi] = acc;
          r.gb[o] += d;
        }
  return r;
}

struct Inputs {
  Tensor x, w, b;
};

Inputs make_inputs(const Case& k, uint64_t seed, DType t = DType::f32) {
  Inputs in;
  in.x = randn({k.n, k.h, k.w, k.c}, seed, t);
  in.w = randn({k.oc, k.kh, k.kw, k.c / k.p.groups}, seed + 1, t, 0.5);
  if (k.bias) in.b = randn({k.oc}, seed + 2, t);
  return in;
}

std::vector<double> values(const Tensor& t) { return t.defined() ? t.to_double_vector() : std::vector<double>{}; }

// Tolerance for sums of `terms` products of O(1) f32 values.
double f32_tol(const Case& k) { return 2e-5 * static_cast<double>(k.kh * k.kw * k.c / k.p.groups + 1); }

}  // namespace

TEST(Conv2d, ForwardAndGradientsMatchReference) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    Inputs in = make_inputs(k, 10);
    Shape ys = ops::conv2d_output_shape(in.x.shape(), in.w.shape(), k.p);
    in.x.set_requires_grad(true);
    in.w.set_requires_grad(true);
    if (k.bias) in.b.set_requires_grad(true);
    Tensor y = ops::conv2d(in.x, in.w, in.b, k.p);
    ASSERT_EQ(y.shape(), ys);
    ASSERT_EQ(y.dtype(), DType::f32);
    Tensor gy = randn(ys, 77);
    y.backward(gy);
    Ref r = reference(k, values(in.x), values(in.w), values(in.b), values(gy), ys[1], ys[2]);
    double tol = f32_tol(k);
    expect_close(y, r.y, tol, 1e-5, std::string(k.name) + " y");
    expect_close(in.x.grad(), r.gx, tol * 4, 1e-5, std::string(k.name) + " dx");
    // Each weight gradient sums over N*OH*OW positions.
    expect_close(in.w.grad(), r.gw, 2e-5 * static_cast<double>(ys[0] * ys[1] * ys[2] + 1), 1e-5,
                 std::string(k.name) + " dw");
    if (k.bias) expect_close(in.b.grad(), r.gb, 1e-4, 1e-5, std::string(k.name) + " db");
  }
}

TEST(Conv2d, OutputShapeFormula) {
  // H + 2p - d(k-1) - 1, floor-divided by the stride, plus one.
  EXPECT_EQ(ops::conv2d_output_shape({2, 224, 224, 3}, {64, 7, 7, 3}, params(2, 2, 3, 3)), (Shape{2, 112, 112, 64}));
  EXPECT_EQ(ops::conv2d_output_shape({1, 6, 7, 3}, {5, 3, 3, 3}, params(2, 2, 0, 0)), (Shape{1, 2, 3, 5}));
  EXPECT_EQ(ops::conv2d_output_shape({1, 9, 9, 4}, {4, 3, 3, 1}, params(1, 1, 2, 2, 2, 2, 4)), (Shape{1, 9, 9, 4}));
}

TEST(Conv2d, OnlySomeInputsRequireGrad) {
  const Case& k = cases()[0];
  Inputs in = make_inputs(k, 20);
  in.w.set_requires_grad(true);  // a frozen input and bias: only dw
  Tensor y = ops::conv2d(in.x, in.w, in.b, k.p);
  Tensor gy = randn(y.shape(), 21);
  y.backward(gy);
  EXPECT_FALSE(in.x.grad().defined());
  EXPECT_FALSE(in.b.grad().defined());
  Ref r = reference(k, values(in.x), values(in.w), values(in.b), values(gy), y.size(1), y.size(2));
  expect_close(in.w.grad(), r.gw, 1e-3, 1e-5, "dw");
  {
    NoGradGuard ng;
    EXPECT_EQ(ops::conv2d(in.x, in.w, in.b, k.p).grad_fn(), nullptr);
  }
}

TEST(Conv2d, Gradcheck) {
  // Conv is linear in each input, so central differences are exact up to f32 rounding.
  for (const char* name : {"3x3_pad1", "stride2_floor", "dilation2", "groups2", "depthwise", "1x1_stride2"}) {
    const Case* k = &find_case(name);
    SCOPED_TRACE(name);
    Inputs in = make_inputs(*k, 30);
    std::vector<Tensor> xs;
    for (Tensor* t : {&in.x, &in.w, &in.b})
      if (t->defined()) xs.push_back(t->set_requires_grad(true));
    auto p = k->p;
    kiln::testing::gradcheck(
        [p](const std::vector<Tensor>& v) { return ops::conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), p); }, xs,
        std::string("conv2d ") + name);
  }
}

TEST(Conv2d, LowPrecisionMatchesF32) {
  // bf16 (8 significant bits) and f16 (11) against the f32 op on the same rounded inputs: only the
  // rounding of the results differs (plus f32 accumulation order), so a relative 2^-7 / 2^-10 holds.
  // That is oneDNN's direct kernels; Winograd (which also rounds its transformed tiles, taken for
  // bf16 "blocked_bwd" on AVX-512 BF16 CPUs) has its own bounds in tests/core/winograd_test.cpp.
  const ops::winograd::Mode prev = ops::winograd::mode();
  ops::winograd::set_mode(ops::winograd::Mode::direct);
  struct Restore {
    ops::winograd::Mode m;
    ~Restore() { ops::winograd::set_mode(m); }
  } restore{prev};
  for (DType t : {DType::bf16, DType::f16}) {
    double rel = t == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
    for (const char* name : {"3x3_pad1", "groups2", "depthwise_s2_mult2", "batch1_wide", "blocked_bwd"}) {
      const Case* k = &find_case(name);
      SCOPED_TRACE(std::string(name) + " " + dtype_name(t));
      Inputs lo = make_inputs(*k, 40, t);
      Inputs hi{lo.x.to(DType::f32), lo.w.to(DType::f32), k->bias ? lo.b.to(DType::f32) : Tensor()};
      for (Inputs* in : {&lo, &hi})
        for (Tensor* v : {&in->x, &in->w, &in->b})
          if (v->defined()) v->set_requires_grad(true);
      Tensor ylo = ops::conv2d(lo.x, lo.w, lo.b, k->p);
      Tensor yhi = ops::conv2d(hi.x, hi.w, hi.b, k->p);
      EXPECT_EQ(ylo.dtype(), t);
      Tensor gy = randn(yhi.shape(), 41, t);
      ylo.backward(gy);
      yhi.backward(gy.to(DType::f32));
      EXPECT_EQ(lo.x.grad().dtype(), t);
      EXPECT_EQ(lo.w.grad().dtype(), t);
      auto close = [&](const Tensor& a, const Tensor& b, double scale, const char* what) {
        expect_close(a, values(b), rel * scale, rel, what);
      };
      close(ylo, yhi, 1.0, "y");
      close(lo.x.grad(), hi.x.grad(), 1.0, "dx");
      close(lo.w.grad(), hi.w.grad(), 4.0, "dw");
      if (k->bias) close(lo.b.grad(), hi.b.grad(), 4.0, "db");
    }
  }
}

TEST(Conv2d, StridedViewsGiveTheSameResult) {
  // An NCHW tensor permuted to NHWC, and a slice: both are packed before oneDNN sees them.
  const Case& k = cases()[1];
  Inputs in = make_inputs(k, 50);
  Tensor nchw = in.x.permute({0, 3, 1, 2}).contiguous();
  Tensor x_view = nchw.permute({0, 2, 3, 1});
  ASSERT_FALSE(x_view.is_contiguous());
  Tensor wide = randn({k.n, k.h, k.w, k.c + 3}, 51);
  Tensor x_slice = wide.slice(3, 1, 1 + k.c);
  expect_close(ops::conv2d(x_view, in.w, in.b, k.p), values(ops::conv2d(in.x, in.w, in.b, k.p)), 0, 0, "permuted");
  Tensor y = ops::conv2d(x_slice, in.w, in.b, k.p);
  Tensor y2 = ops::conv2d(x_slice.contiguous(), in.w, in.b, k.p);
  expect_close(y, values(y2), 0, 0, "sliced");
}

TEST(Conv2d, EmptyBatch) {
  Tensor x = Tensor::zeros({0, 5, 5, 3});
  Tensor w = randn({4, 3, 3, 3}, 1).set_requires_grad(true);
  Tensor y = ops::conv2d(x, w, Tensor(), params(1, 1, 1, 1));
  EXPECT_EQ(y.shape(), (Shape{0, 5, 5, 4}));
}

TEST(Conv2d, PrimitivesAreCachedAndThreadSafe) {
  const Case& k = cases()[0];
  Inputs in = make_inputs(k, 60);
  Tensor y0 = ops::conv2d(in.x, in.w, in.b, k.p);
  size_t n = onednn::cache().size();
  Tensor y1 = ops::conv2d(in.x, in.w, in.b, k.p);
  EXPECT_EQ(onednn::cache().size(), n) << "a second call of the same shape created primitives";
  expect_close(y1, values(y0), 0, 0, "repeat");
  // Several threads, each with its own shapes and a shared one, against the reference.
  std::vector<std::thread> threads;
  std::vector<int> failures(6, 0);
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([t, &failures] {
      const Case& c = cases()[t % 3 == 0 ? 0 : (t * 2) % cases().size()];
      Inputs v = make_inputs(c, 100 + t);
      for (int rep = 0; rep < 3; ++rep) {
        Tensor y = ops::conv2d(v.x, v.w, v.b, c.p);
        Ref r = reference(c, values(v.x), values(v.w), values(v.b), {}, y.size(1), y.size(2));
        std::vector<double> got = y.to_double_vector();
        for (size_t i = 0; i < got.size(); ++i)
          if (std::fabs(got[i] - r.y[i]) > f32_tol(c) + 1e-5 * std::fabs(r.y[i])) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 6; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

TEST(Conv2d, ErrorsNameTheOpAndShapes) {
  Tensor x = randn({2, 5, 5, 3}, 1), w = randn({4, 3, 3, 3}, 2);
  expect_error(
      [&] {
        ops::conv2d(x, randn({4, 3, 3, 2}, 3), Tensor(), {});
      },
      {"conv2d", "[4, 3, 3, 2]", "[2, 5, 5, 3]", "channels"});
  expect_error([&] { ops::conv2d(x, w.to(DType::bf16), Tensor(), {}); },
               {"conv2d", "bf16[4, 3, 3, 3]", "f32[2, 5, 5, 3]", "dtype"});
  expect_error([&] { ops::conv2d(x.to(DType::f64), w.to(DType::f64), Tensor(), {}); }, {"conv2d", "f64", "accepted"});
  expect_error([&] { ops::conv2d(randn({5, 5, 3}, 4), w, Tensor(), {}); }, {"conv2d", "[5, 5, 3]", "NHWC"});
  expect_error([&] { ops::conv2d(x, w, randn({3}, 5), {}); }, {"conv2d", "bias", "f32[3]", "[4]"});
  expect_error(
      [&] {
        ops::conv2d(x, randn({4, 3, 3, 1}, 6), Tensor(), params(1, 1, 0, 0, 1, 1, 3));
      },
      {"conv2d", "groups=3", "[2, 5, 5, 3]", "[4, 3, 3, 1]"});
  expect_error([&] { ops::conv2d(x, randn({4, 7, 7, 3}, 7), Tensor(), {}); }, {"conv2d", "7x7", "[2, 5, 5, 3]"});
  expect_error([&] { ops::conv2d(x, w, Tensor(), params(0, 1, 0, 0)); }, {"conv2d", "stride 0x1"});
}
