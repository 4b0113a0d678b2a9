// dropout: keep-rate statistics, inverted scaling, backward = the same mask, determinism from the
// generator state (replay, thread count, checkpointing), eval/p=0 identity, errors, and a fixed mask.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "core/autograd.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/rng.h"
#include "tests/core/nn_test_util.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::randn;

TEST(Dropout, KeepRateAndScaling) {
  const int64_t n = 100000;
  for (double p : {0.1, 0.5, 0.8}) {
    SCOPED_TRACE("p " + std::to_string(p));
    manual_seed(77);
    Tensor x = ops::add_scalar(randn({n}, 60), 3.0);  // no zeros: a zero output means dropped
    Tensor y = ops::dropout(x, p, true);
    std::vector<double> xv = x.to_double_vector(), yv = y.to_double_vector();
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (yv[i] == 0) continue;
      ++kept;
      ASSERT_NEAR(yv[i], xv[i] / (1 - p), 1e-6 * std::fabs(yv[i])) << "element " << i;
    }
    // 1e5 Bernoulli(1-p) draws: the kept fraction is within 5 standard deviations (~0.008 at p=0.5).
    double rate = static_cast<double>(kept) / n, sd = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(rate, 1 - p, 5 * sd);
  }
}

TEST(Dropout, BackwardUsesTheSameMask) {
  manual_seed(3);
  Tensor x = ops::add_scalar(randn({7, 13}, 61, DType::f64), 5.0).set_requires_grad(true);
  Tensor y = ops::dropout(x, 0.3, true);
  Tensor dy = randn({7, 13}, 62, DType::f64);
  y.backward(dy);
  std::vector<double> yv = y.to_double_vector(), g = x.grad().to_double_vector(), d = dy.to_double_vector();
  int dropped = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    double want = yv[i] == 0 ? 0.0 : d[i] / 0.7;
    dropped += yv[i] == 0;
    EXPECT_NEAR(g[i], want, 1e-12) << "element " << i;
  }
  EXPECT_GT(dropped, 0);
}

TEST(Dropout, Gradcheck) {
  // The mask is fixed by restoring the generator state before every evaluation.
  Tensor x = randn({3, 4, 5}, 63, DType::f64).set_requires_grad(true);
  RngState s{11, 0};
  kiln::testing::gradcheck([s](const std::vector<Tensor>& in) {
    default_generator().set_state(s);
    return ops::dropout(in[0], 0.4, true);
  }, {x}, "dropout");
}

TEST(Dropout, SameStateSameMask) {
  Tensor x = Tensor::ones({1000});
  manual_seed(9);
  Tensor a = ops::dropout(x, 0.5, true);
  EXPECT_EQ(default_generator().state().offset, 1000u);  // one counter per element
  Tensor b = ops::dropout(x, 0.5, true);                  // the next draw: a different mask
  manual_seed(9);
  Tensor c = ops::dropout(x, 0.5, true);
  EXPECT_EQ(a.to_double_vector(), c.to_double_vector());
  EXPECT_NE(a.to_double_vector(), b.to_double_vector());
  // The mask does not depend on the number of threads (counter-based draws).
  Tensor big = Tensor::ones({200000});
  manual_seed(10);
  std::vector<double> multi = ops::dropout(big, 0.5, true).to_double_vector();
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  manual_seed(10);
  std::vector<double> single = ops::dropout(big, 0.5, true).to_double_vector();
  omp_set_num_threads(threads);
  EXPECT_EQ(multi, single);
}

TEST(Dropout, CheckpointRecomputesTheSameMask) {
  Tensor w = randn({6, 8}, 64).set_requires_grad(true);
  Tensor x = randn({6, 8}, 65);
  auto segment = [&](const std::vector<Tensor>& in) { return ops::dropout(ops::mul(in[0], w), 0.5, true); };
  manual_seed(21);
  ops::sum(ops::square(segment({x}))).backward();
  std::vector<double> plain = w.grad().to_double_vector();
  w.zero_grad();
  manual_seed(21);
  // Draw something after the checkpointed forward: the recompute must still see the old state.
  Tensor out = checkpoint(segment, {x});
  ops::dropout(Tensor::ones({50}), 0.5, true);
  ops::sum(ops::square(out)).backward();
  expect_close(w.grad(), plain, 0, 0, "checkpointed gradient");
}

TEST(Dropout, IdentityInEvalAndForPZero) {
  Tensor x = randn({4, 5}, 66).set_requires_grad(true);
  manual_seed(1);
  EXPECT_TRUE(ops::dropout(x, 0.5, false).same(x));
  EXPECT_TRUE(ops::dropout(x, 0.0, true).same(x));
  EXPECT_EQ(default_generator().state().offset, 0u);  // nothing drawn
}

TEST(Dropout, LowPrecisionKeepsItsDtype) {
  Tensor x = ops::add_scalar(randn({64}, 67), 2.0);
  manual_seed(4);
  Tensor y32 = ops::dropout(x, 0.25, true);
  manual_seed(4);
  Tensor xb = x.to(DType::bf16).set_requires_grad(true);
  Tensor yb = ops::dropout(xb, 0.25, true);
  EXPECT_EQ(yb.dtype(), DType::bf16);
  expect_close(yb, y32.to_double_vector(), 2e-2, 1e-2, "bf16 dropout");
  std::vector<double> a = y32.to_double_vector(), b = yb.to_double_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i] == 0, b[i] == 0) << "mask differs at " << i;
  yb.backward(Tensor::ones({64}, DType::bf16));
  EXPECT_EQ(xb.grad().dtype(), DType::bf16);
}

TEST(Dropout, ErrorsNameOpAndShapes) {
  using kiln::testing::expect_error;
  Tensor x = Tensor::ones({2, 3});
  expect_error([&] { ops::dropout(x, 1.0, true); }, {"dropout", "[0, 1)", "1", "f32[2, 3]"});
  expect_error([&] { ops::dropout(x, -0.1, false); }, {"dropout", "[0, 1)", "-0.1"});
  expect_error([&] { ops::dropout(Tensor::ones({2}, DType::i64), 0.5, true); }, {"dropout", "floating", "i64[2]"});
}

TEST(Dropout, FixedMask) {
  // torch's dropout draws from its own generator, so the mask here comes from a Python port of
  // core/rng.h (it pins the mask across versions: checkpoints resume with the same masks); the
  // scaling is torch's inverted dropout, x * mask / (1 - p), computed with torch in f32:
  //   M = 2**64 - 1
  //   def mix64(x):
  //       x = (x + 0x9e3779b97f4a7c15) & M
  //       x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M
  //       x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M
  //       return x ^ (x >> 31)
  //   def uniform_at(seed, offset, i):
  //       return (mix64(((seed * 0x2545f4914f6cdd1d) & M) ^ mix64(offset + i)) >> 40) / 2**24
  //   u = torch.tensor([uniform_at(1234, 7, i) for i in range(12)], dtype=torch.float32)
  //   x = torch.tensor([math.sin(0.7*i+0.3)*1.5 for i in range(12)])
  //   y = x * (u >= 0.4).float() / (1 - 0.4)
  default_generator().set_state({1234, 7});
  Tensor x = kiln::testing::wave_tensor({12});
  Tensor y = ops::dropout(x, 0.4, true);
  EXPECT_NEAR(uniform_at({1234, 7}, 0), 0.86636823, 1e-8);
  EXPECT_NEAR(uniform_at({1234, 7}, 2), 0.31518114, 1e-8);
  expect_close(y,
               {0.7388005, 2.1036773, 0.0, 1.6886579, 0.1039516, -1.5296446, 0.0, -2.2086365, -0.9346916, 0.7788534,
                2.1260915, 2.4733956},
               2e-7, 1e-6, "y");
}
