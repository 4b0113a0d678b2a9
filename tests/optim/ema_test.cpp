// The weight EMA (optim/ema.h): the options and their errors, the decay with and without warmup,
// the update against a double-precision reference, buffers copied, mismatched tensors refused.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "optim/ema.h"
#include "tests/expect_error.h"

using namespace kiln;

TEST(Ema, OptionsOffOnAndObject) {
  EXPECT_FALSE(EmaOptions::from_json(json()).enabled);
  EXPECT_FALSE(EmaOptions::from_json(json(false)).enabled);
  EmaOptions on = EmaOptions::from_json(json(true));
  EXPECT_TRUE(on.enabled);
  EXPECT_DOUBLE_EQ(on.decay, 0.9998);
  EXPECT_TRUE(on.warmup);
  EXPECT_EQ(on.best_by, "live");
  EmaOptions o = EmaOptions::from_json(json::parse(R"({"decay": 0.999, "warmup": false, "best_by": "ema"})"));
  EXPECT_TRUE(o.enabled);
  EXPECT_DOUBLE_EQ(o.decay, 0.999);
  EXPECT_FALSE(o.warmup);
  EXPECT_EQ(o.best_by, "ema");
  EXPECT_EQ(EmaOptions::from_json(o.to_json()).to_json(), o.to_json());  // round trip
  EXPECT_EQ(EmaOptions().to_json(), json(false));
}

TEST(Ema, BadOptionsNameTheKeyAndWhatIsAccepted) {
  using kiln::testing::expect_error;
  expect_error([] { EmaOptions::from_json(json::parse(R"({"decay": 1.0})")); },
               {"train.ema.decay = 1.0", "accepted: a number in (0, 1)"});
  expect_error([] { EmaOptions::from_json(json::parse(R"({"decay": 0})")); }, {"train.ema.decay = 0"});
  expect_error([] { EmaOptions::from_json(json::parse(R"({"decay": "high"})")); }, {"train.ema.decay = \"high\""});
  expect_error([] { EmaOptions::from_json(json::parse(R"({"best_by": "best"})")); }, {"best_by", "live", "ema"});
  expect_error([] { EmaOptions::from_json(json::parse(R"({"decy": 0.9})")); }, {"decy"});
  expect_error([] { EmaOptions::from_json(json(0.999)); }, {"train.ema = 0.999", "accepted: false or null"});
}

TEST(Ema, DecayWithAndWithoutWarmup) {
  EmaOptions o;
  o.enabled = true;
  o.decay = 0.99;
  o.warmup = true;
  WeightEma w(o, {});
  EXPECT_DOUBLE_EQ(w.decay_at(0), 0.1);            // (1 + 0) / (10 + 0)
  EXPECT_DOUBLE_EQ(w.decay_at(90), 91.0 / 100.0);  // still below the decay
  EXPECT_DOUBLE_EQ(w.decay_at(10000), 0.99);       // capped
  o.warmup = false;
  EXPECT_DOUBLE_EQ(WeightEma(o, {}).decay_at(0), 0.99);
}

TEST(Ema, UpdateAveragesParametersAndCopiesBuffers) {
  manual_seed(7);
  Tensor p = rand_normal({5, 3}, 0, 1), e = Tensor::zeros({5, 3});
  Tensor buf = Tensor::zeros({4}), ebuf = Tensor::zeros({4});
  Tensor count = Tensor::zeros({1}, DType::i64), ecount = Tensor::zeros({1}, DType::i64);
  EmaOptions o;
  o.enabled = true;
  o.decay = 0.9;
  o.warmup = true;
  WeightEma ema(o, {{"w", p, e, true}, {"bn.running_mean", buf, ebuf, false}, {"bn.n", count, ecount, false}});
  ema.reset_to_live();
  std::vector<double> ref = p.to_double_vector();
  for (int64_t t = 0; t < 30; ++t) {
    // The "optimizer step": new weights and buffers.
    Tensor np = rand_normal({5, 3}, 0, 1);
    copy_tensor(p, np);
    copy_tensor(buf, rand_normal({4}, 0, 1));
    copy_tensor(count, Tensor::full({1}, static_cast<double>(t + 1), DType::i64));
    ema.update(t);
    const double d = std::min(0.9, (1.0 + t) / (10.0 + t));
    std::vector<double> w = p.to_double_vector();
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = d * ref[i] + (1 - d) * w[i];
  }
  std::vector<double> got = e.to_double_vector();
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-6) << i;  // f32 against f64
  EXPECT_EQ(ebuf.to_double_vector(), buf.to_double_vector());  // buffers: copied, not averaged
  EXPECT_EQ(ecount.to_double_vector(), std::vector<double>{30});
  // The average really lags: it is not the last weights.
  EXPECT_GT(std::abs(got[0] - p.to_double_vector()[0]), 1e-3);
}

// update(t, skip): the fp16 scaler's count of non-finite steps in a row (> 0: the step was skipped)
// leaves the averages and the copies as they are; 0 updates as update(t). On a GPU the kernels read
// it there (tests/gpu/ema_test.cpp); here the same contract on the CPU.
TEST(Ema, ASkipFlagAboveZeroLeavesEverythingAsItIs) {
  Tensor p = Tensor::full({3}, 1.0), e = Tensor::zeros({3});
  Tensor count = Tensor::full({1}, 5.0, DType::i64), ecount = Tensor::zeros({1}, DType::i64);
  EmaOptions o;
  o.enabled = true;
  o.decay = 0.5;
  o.warmup = false;
  WeightEma ema(o, {{"w", p, e, true}, {"n", count, ecount, false}});
  ema.update(0, Tensor::full({1}, 2.0, DType::f64));  // skipped (2 bad steps in a row)
  EXPECT_EQ(e.to_double_vector(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(ecount.to_double_vector(), std::vector<double>{0});
  ema.update(0, Tensor::zeros({1}, DType::f64));  // taken
  EXPECT_EQ(e.to_double_vector(), (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(ecount.to_double_vector(), std::vector<double>{5});
  using kiln::testing::expect_error;
  expect_error([&] { ema.update(0, Tensor::zeros({1}, DType::i32)); }, {"EMA: the skip flag must be an f64 [1]"});
}

TEST(Ema, MismatchedTensorsAreRefused) {
  EmaOptions o;
  o.enabled = true;
  using kiln::testing::expect_error;
  expect_error([&] { WeightEma(o, {{"fc.weight", Tensor::zeros({2, 3}), Tensor::zeros({3, 2}), true}}); },
               {"fc.weight", "does not match"});
  expect_error([&] { WeightEma(o, {{"n", Tensor::zeros({2}, DType::i64), Tensor::zeros({2}, DType::i64), true}}); },
               {"'n' must be contiguous f32"});
  expect_error([&] { WeightEma(o, {{"b", Tensor::zeros({2}), Tensor::zeros({2}, DType::i64), false}}); },
               {"copied tensor 'b'"});
}
