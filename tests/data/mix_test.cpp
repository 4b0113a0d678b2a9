// Batch-level MixUp / CutMix (data/mix.h): the options and their errors, the draw (a pure function
// of (seed, epoch, batch index), timm's choice rules, the Beta sampler), the mixed images (MixUp
// blend, CutMix box from the flipped batch, corrected lambda) on 1- and 3-channel f32 and bf16
// batches, the soft targets with label smoothing, and the same mixed batches with 0 or 3 loader
// workers and from a fresh loader (resume). Also flip_images_lr (flip TTA).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/autograd.h"
#include "core/ops/loss.h"
#include "data/loader.h"
#include "data/mix.h"
#include "data/synthetic.h"
#include "data_test_util.h"
#include "tests/gradcheck.h"

using namespace kiln;
namespace kt = kiln::testing;

namespace {

MixupOptions timm_default() {
  return MixupOptions::from_json(json::parse(R"({"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "prob": 1.0, "switch_prob": 0.5})"));
}

// (N, H, W, C) f32 images with distinct values v = 1000 n + 100 y + 10 x + c.
Tensor ramp(int64_t N, int64_t H, int64_t W, int64_t C) {
  std::vector<float> v;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        for (int64_t c = 0; c < C; ++c) v.push_back(static_cast<float>(1000 * n + 100 * y + 10 * x + c) / 1024.0f);
  return Tensor::from_vector(v, {N, H, W, C}, DType::f32);
}

float at(const std::vector<double>& v, int64_t H, int64_t W, int64_t C, int64_t n, int64_t y, int64_t x, int64_t c) {
  return static_cast<float>(v[((n * H + y) * W + x) * C + c]);
}

}  // namespace

TEST(MixupOptions, ReadsTimmNamesAndRejectsBadValues) {
  MixupOptions o = timm_default();
  EXPECT_EQ(o.mixup_alpha, 0.8);
  EXPECT_EQ(o.cutmix_alpha, 1.0);
  EXPECT_TRUE(o.enabled());
  EXPECT_EQ(MixupOptions::from_json(o.to_json()).to_json(), o.to_json());
  EXPECT_FALSE(MixupOptions{}.enabled());  // both alphas 0 by default
  EXPECT_FALSE(MixupOptions::from_json(json::parse(R"({"mixup_alpha": 1, "prob": 0})")).enabled());

  auto err = [](const char* text) {
    return kt::error_of([&] { MixupOptions::from_json(json::parse(text), "train.mixup"); });
  };
  std::string e = err(R"({"mixup_alpha": -0.1})");
  EXPECT_HAS(e, "train.mixup.mixup_alpha");
  EXPECT_HAS(e, "accepted");
  e = err(R"({"cutmix_alpha": -1})");
  EXPECT_HAS(e, "train.mixup.cutmix_alpha");
  e = err(R"({"prob": 1.5})");
  EXPECT_HAS(e, "train.mixup.prob");
  EXPECT_HAS(e, "accepted: 0..1");
  e = err(R"({"switch_prob": -0.2})");
  EXPECT_HAS(e, "train.mixup.switch_prob");
  e = err(R"({"mixup_alfa": 0.2})");
  EXPECT_HAS(e, "mixup_alfa");
  e = err("0.8");
  EXPECT_HAS(e, "train.mixup");
  EXPECT_HAS(e, "mixup_alpha");
}

TEST(MixDraw, IsAPureFunctionOfSeedEpochAndBatch) {
  MixupOptions o = timm_default();
  MixParams a = draw_mix(o, 5, 2, 17, 28, 28);
  for (int i = 0; i < 3; ++i) draw_mix(o, 5, 2, i, 28, 28);  // other draws in between change nothing
  MixParams b = draw_mix(o, 5, 2, 17, 28, 28);
  EXPECT_EQ(a.lam, b.lam);
  EXPECT_EQ(a.cutmix, b.cutmix);
  EXPECT_EQ(a.y0, b.y0);
  EXPECT_EQ(a.x1, b.x1);
  // Other batches, epochs and seeds draw other lambdas.
  std::set<double> lams;
  for (int64_t seed : {0, 1})
    for (int64_t epoch : {0, 1})
      for (int64_t batch = 0; batch < 10; ++batch) lams.insert(draw_mix(o, seed, epoch, batch, 28, 28).lam);
  EXPECT_GT(lams.size(), 35u);
}

TEST(MixDraw, FollowsTimmsChoiceRules) {
  auto count = [](const MixupOptions& o, int64_t& mixed, int64_t& cutmix) {
    mixed = cutmix = 0;
    for (int64_t b = 0; b < 2000; ++b) {
      MixParams p = draw_mix(o, 1, 0, b, 32, 32);
      mixed += p.mixed;
      cutmix += p.cutmix;
      if (!p.mixed) {
        EXPECT_EQ(p.lam, 1.0);
      }
      EXPECT_GE(p.lam, 0.0);
      EXPECT_LE(p.lam, 1.0);
    }
  };
  int64_t mixed, cutmix;
  MixupOptions o = timm_default();
  count(o, mixed, cutmix);
  EXPECT_EQ(mixed, 2000);
  EXPECT_NEAR(cutmix, 1000, 100);  // switch_prob 0.5
  o.prob = 0.3;
  count(o, mixed, cutmix);
  EXPECT_NEAR(mixed, 600, 80);
  o.prob = 1;
  o.cutmix_alpha = 0;  // MixUp only
  count(o, mixed, cutmix);
  EXPECT_EQ(cutmix, 0);
  o.cutmix_alpha = 1;
  o.mixup_alpha = 0;  // CutMix only, whatever switch_prob says
  o.switch_prob = 0;
  count(o, mixed, cutmix);
  EXPECT_EQ(cutmix, 2000);
  o.prob = 0;
  count(o, mixed, cutmix);
  EXPECT_EQ(mixed, 0);
}

TEST(MixDraw, BetaSamplerHasTheBetaMoments) {
  for (double a : {0.2, 0.8, 1.0, 2.5}) {
    SampleRng rng(SampleRng::sample_key(11, 0, static_cast<uint64_t>(a * 10)));
    const int n = 40000;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
      double x = sample_beta(rng, a, a);
      ASSERT_GE(x, 0.0);
      ASSERT_LE(x, 1.0);
      s += x;
      s2 += x * x;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.01) << "alpha " << a;
    EXPECT_NEAR(var, 1.0 / (4 * (2 * a + 1)), 0.006) << "alpha " << a;  // a^2 / ((2a)^2 (2a + 1))
  }
}

TEST(MixDraw, CutMixBoxAndCorrectedLambda) {
  MixupOptions o;
  o.cutmix_alpha = 1.0;
  int64_t clipped = 0;
  for (int64_t b = 0; b < 500; ++b) {
    const int64_t H = 28, W = 20;
    MixParams p = draw_mix(o, 2, 1, b, H, W);
    ASSERT_TRUE(p.cutmix);
    ASSERT_LE(0, p.y0);
    ASSERT_LE(p.y0, p.y1);
    ASSERT_LE(p.y1, H);
    ASSERT_LE(0, p.x0);
    ASSERT_LE(p.x0, p.x1);
    ASSERT_LE(p.x1, W);
    EXPECT_DOUBLE_EQ(p.lam, 1.0 - static_cast<double>((p.y1 - p.y0) * (p.x1 - p.x0)) / (H * W));
    // Unclipped, the box is 2 * (cut / 2) on a side, cut <= the side * sqrt(1 - lam_drawn).
    EXPECT_LE(p.y1 - p.y0, H);
    clipped += (p.y0 == 0 || p.y1 == H || p.x0 == 0 || p.x1 == W);
  }
  EXPECT_GT(clipped, 50);  // boxes near the border are clipped, and lambda corrected for it
}

TEST(MixImages, MixUpBlendsWithTheFlippedBatch) {
  for (int64_t C : {1, 3}) {
    const int64_t N = 5, H = 4, W = 3;
    Tensor x = ramp(N, H, W, C);
    std::vector<double> before = x.to_double_vector();
    MixParams p;
    p.mixed = true;
    p.lam = 0.7;
    Tensor m = mix_images(x, p);
    EXPECT_EQ(x.to_double_vector(), before);  // the input is left as it is
    std::vector<double> v = m.to_double_vector();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < H * W * C; ++k) {
        float want = 0.7f * static_cast<float>(before[n * H * W * C + k]) +
                     0.3f * static_cast<float>(before[(N - 1 - n) * H * W * C + k]);
        ASSERT_EQ(static_cast<float>(v[n * H * W * C + k]), want) << "C " << C << " n " << n << " k " << k;
      }
    // bf16: the same blend, rounded to bf16.
    Tensor mb = mix_images(x.to(DType::bf16), p);
    EXPECT_EQ(mb.dtype(), DType::bf16);
    std::vector<double> vb = mb.to_double_vector();
    for (size_t k = 0; k < v.size(); ++k) ASSERT_NEAR(vb[k], v[k], 0.01 * std::fabs(v[k]) + 1e-3);
  }
}

// The trainer's GPU path mixes straight into a pinned buffer (mix_batch with a PinnedStaging): the
// same values as a new tensor, the buffer itself returned; a buffer that does not fit is refused.
// Without a visible GPU the staging hands out ordinary tensors and stage() keeps its argument.
TEST(MixImages, IntoAGivenBufferAndThroughAStaging) {
  Tensor x = ramp(4, 3, 2, 3);
  MixParams p;
  p.mixed = true;
  p.lam = 0.6;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor m = mix_images(x, p, out);
  EXPECT_TRUE(m.same(out));
  EXPECT_EQ(m.to_double_vector(), mix_images(x, p).to_double_vector());
  EXPECT_THROW(mix_images(x, p, Tensor::empty({4, 3, 2, 1}, x.dtype())), Error);
  EXPECT_THROW(mix_images(x, p, Tensor::empty(x.shape(), DType::bf16)), Error);
  EXPECT_THROW(mix_images(x, p, x), Error);  // in place would read what it already wrote
  if (cuda_device_count() == 0) {
    PinnedStaging staging;
    Tensor t = Tensor::from_vector(std::vector<float>{1, 2}, {2});
    EXPECT_TRUE(staging.stage(t, 1).same(t));
    EXPECT_EQ(staging.buffer({2, 3}, DType::f32, 0).shape(), (Shape{2, 3}));
  }
}

TEST(MixImages, CutMixPastesTheBoxFromThePartner) {
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t C : {1, 3}) {
      const int64_t N = 4, H = 6, W = 5;
      Tensor x = ramp(N, H, W, C).to(dt);
      std::vector<double> in = x.to_double_vector();
      MixParams p;
      p.mixed = p.cutmix = true;
      p.y0 = 1, p.y1 = 4, p.x0 = 2, p.x1 = 5;
      p.lam = 1.0 - 9.0 / 30.0;
      std::vector<double> out = mix_images(x, p).to_double_vector();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t y = 0; y < H; ++y)
          for (int64_t xx = 0; xx < W; ++xx)
            for (int64_t c = 0; c < C; ++c) {
              bool inside = y >= 1 && y < 4 && xx >= 2 && xx < 5;
              ASSERT_EQ(at(out, H, W, C, n, y, xx, c), at(in, H, W, C, inside ? N - 1 - n : n, y, xx, c))
                  << dtype_name(dt) << " C " << C << " n " << n << " y " << y << " x " << xx;
            }
    }
  MixParams none;
  Tensor x = ramp(2, 2, 2, 1);
  EXPECT_EQ(mix_images(x, none).to_double_vector(), x.to_double_vector());
}

TEST(MixTargets, AreTimmsSmoothedMixOfTwoOneHots) {
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 2, 1}, {3});
  const double lam = 0.75, e = 0.1;
  std::vector<double> t = mix_targets(y, 4, lam, e).to_double_vector();
  const double off = e / 4, on = 1 - e + off;
  // Row 0: y = 0, partner y[2] = 1. Row 1 pairs with itself (odd N).
  std::vector<double> want{lam * on + (1 - lam) * off, lam * off + (1 - lam) * on, off, off,
                           off, off, on, off,
                           lam * off + (1 - lam) * on, lam * on + (1 - lam) * off, off, off};
  ASSERT_EQ(t.size(), want.size());
  for (size_t k = 0; k < t.size(); ++k) EXPECT_NEAR(t[k], want[k], 1e-7) << k;
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(t[i * 4] + t[i * 4 + 1] + t[i * 4 + 2] + t[i * 4 + 3], 1.0, 1e-6);
  EXPECT_EQ(dominant_labels(y, 0.75).to_int_vector(), (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(dominant_labels(y, 0.25).to_int_vector(), (std::vector<int64_t>{1, 2, 0}));
  EXPECT_HAS(kt::error_of([&] { mix_targets(y, 2, 0.5, 0.0); }), "out of range");
}

namespace {
std::vector<std::vector<double>> mixed_epoch(DataLoader& l, int64_t epoch, const MixupOptions& o) {
  std::vector<std::vector<double>> out;
  l.start_epoch(epoch);
  Batch b;
  while (l.next(b)) {
    MixedBatch m = mix_batch(o, 9, b, 7, 0.1);
    out.push_back(m.images.to_double_vector());
    if (m.targets.defined()) out.push_back(m.targets.to_double_vector());
  }
  return out;
}
}  // namespace

TEST(MixBatch, SameBatchesWithAnyWorkerCountAndOnResume) {
  for (int64_t C : {1, 3})
    for (const char* dtype : {"f32", "bf16"}) {
      SyntheticOptions so;
      so.size = 70;
      so.height = 6;
      so.width = 5;
      so.channels = C;
      so.num_classes = 7;
      so.seed = 3;
      auto ds = std::make_shared<SyntheticDataset>(so);
      LoaderOptions lo;
      lo.batch_size = 16;
      lo.seed = 9;
      lo.dtype = dtype;
      MixupOptions o = timm_default();
      lo.workers = 0;
      DataLoader one(ds, Pipeline(), lo);
      lo.workers = 3;
      DataLoader many(ds, Pipeline(), lo);
      auto a0 = mixed_epoch(one, 0, o), a1 = mixed_epoch(one, 1, o);
      auto b0 = mixed_epoch(many, 0, o), b1 = mixed_epoch(many, 1, o);
      EXPECT_EQ(a0, b0);
      EXPECT_EQ(a1, b1);
      EXPECT_NE(a0, a1);
      DataLoader resumed(ds, Pipeline(), lo);  // a new process resuming at epoch 1
      EXPECT_EQ(mixed_epoch(resumed, 1, o), a1) << "C " << C << " " << dtype;
      // Mixing changed the images (some batch mixed with another sample).
      lo.workers = 0;
      DataLoader plain(ds, Pipeline(), lo);
      auto p0 = mixed_epoch(plain, 0, MixupOptions{});
      ASSERT_EQ(p0.size(), 5u);  // images only (no targets when off): 5 batches
      int64_t changed = 0;  // (a tiny CutMix box can be empty: lam = 1, nothing pasted)
      for (size_t i = 0; i < p0.size(); ++i) changed += p0[i] != a0[2 * i];
      EXPECT_GE(changed, 3);
    }
}

TEST(FlipImages, MirrorsAlongTheWidth) {
  for (int64_t C : {1, 3})
    for (DType dt : {DType::f32, DType::bf16}) {
      const int64_t N = 2, H = 3, W = 4;
      Tensor x = ramp(N, H, W, C).to(dt);
      std::vector<double> in = x.to_double_vector(), out = flip_images_lr(x).to_double_vector();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t y = 0; y < H; ++y)
          for (int64_t xx = 0; xx < W; ++xx)
            for (int64_t c = 0; c < C; ++c)
              ASSERT_EQ(at(out, H, W, C, n, y, xx, c), at(in, H, W, C, n, y, W - 1 - xx, c));
      EXPECT_EQ(flip_images_lr(flip_images_lr(x)).to_double_vector(), in);
    }
}

// The soft cross-entropy (core/ops/loss.h) on the targets mix_targets makes.
TEST(SoftCrossEntropy, OneHotTargetsEqualClassIndexLoss) {
  using kiln::testing::expect_close;
  using kiln::testing::randn;
  const int64_t N = 9, K = 5;
  Tensor z1 = randn({N, K}, 3, DType::f32, 2.0).set_requires_grad(true);
  Tensor z2 = z1.detach().clone().set_requires_grad(true);
  std::vector<int64_t> y{0, 4, 2, 2, 1, 3, 0, 4, 1};
  Tensor labels = Tensor::from_vector(y, {N});
  for (double e : {0.0, 0.1}) {
    Tensor hard = ops::cross_entropy(z1, labels, e);
    Tensor soft = ops::soft_cross_entropy(z2, mix_targets(labels, K, 1.0, 0.0), e);
    EXPECT_NEAR(hard.item(), soft.item(), 1e-6);
    hard.backward();
    soft.backward();
    expect_close(z2.grad(), z1.grad().to_double_vector(), 1e-6, 1e-6, "dlogits");
    z1.zero_grad();
    z2.zero_grad();
  }
}

TEST(SoftCrossEntropy, SmoothingInTheOpEqualsTimmSmoothedTargets) {
  using kiln::testing::randn;
  // timm's mixup_target applies the smoothing to both one-hots; the op's e applies it to the mix.
  const int64_t N = 6, K = 10;
  Tensor z = randn({N, K}, 5, DType::f32, 2.0);
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{1, 7, 3, 3, 9, 0}, {N});
  for (double lam : {1.0, 0.7, 0.31}) {
    double a = ops::soft_cross_entropy(z, mix_targets(labels, K, lam, 0.1), 0.0).item();
    double b = ops::soft_cross_entropy(z, mix_targets(labels, K, lam, 0.0), 0.1).item();
    EXPECT_NEAR(a, b, 1e-6) << "lam " << lam;
  }
}
