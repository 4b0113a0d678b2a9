// Learning-rate schedules: each curve at chosen iterations (warm-up start and end, milestones,
// cosine midpoint and end), JSON round trip through the factory, and config errors.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

using namespace kiln;

namespace {
// base lr 0.1, 100 iterations per epoch, 90 epochs.
const ScheduleContext kCtx{0.1, 100, 90};

std::unique_ptr<LrSchedule> build(const std::string& text, const ScheduleContext& c = kCtx) {
  return make_schedule(json::parse(text), c);
}

void expect_error(const std::string& text, const std::string& what) {
  try {
    build(text);
    ADD_FAILURE() << "no error for " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(LrSchedule, Constant) {
  auto s = build(R"({"name": "constant"})");
  for (int64_t t : {0, 1, 4500, 8999, 100000}) EXPECT_DOUBLE_EQ(s->lr_at(t), 0.1);
}

TEST(LrSchedule, StepDecaysAtEpochBoundaries) {
  auto s = build(R"({"name": "step", "step_size": 30, "gamma": 0.1})");
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s->lr_at(2999), 0.1);   // last iteration of epoch 29
  EXPECT_DOUBLE_EQ(s->lr_at(3000), 0.01);  // first of epoch 30
  EXPECT_DOUBLE_EQ(s->lr_at(5999), 0.01);
  EXPECT_NEAR(s->lr_at(6000), 0.001, 1e-15);
  EXPECT_NEAR(s->lr_at(8999), 0.001, 1e-15);
}

TEST(LrSchedule, MultiStepAtMilestones) {
  auto s = build(R"({"name": "multistep", "milestones": [30, 60, 80], "gamma": 0.2})");
  EXPECT_DOUBLE_EQ(s->lr_at(2999), 0.1);
  EXPECT_NEAR(s->lr_at(3000), 0.02, 1e-15);
  EXPECT_NEAR(s->lr_at(5999), 0.02, 1e-15);
  EXPECT_NEAR(s->lr_at(6000), 0.004, 1e-15);
  EXPECT_NEAR(s->lr_at(7999), 0.004, 1e-15);
  EXPECT_NEAR(s->lr_at(8000), 0.0008, 1e-15);
  EXPECT_NEAR(s->lr_at(8999), 0.0008, 1e-15);
}

TEST(LrSchedule, CosineMidpointAndEnd) {
  auto s = build(R"({"name": "cosine", "min_lr": 0.001})");
  const double total = 9000;
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.1);
  EXPECT_NEAR(s->lr_at(4500), (0.1 + 0.001) / 2, 1e-15);  // midpoint: halfway between base and min
  EXPECT_NEAR(s->lr_at(2250), 0.001 + 0.099 * (1 + std::cos(std::numbers::pi / 4)) / 2, 1e-15);
  EXPECT_NEAR(s->lr_at(8999), 0.001 + 0.099 * (1 + std::cos(std::numbers::pi * 8999 / total)) / 2, 1e-15);
  EXPECT_NEAR(s->lr_at(9000), 0.001, 1e-15);
  EXPECT_NEAR(s->lr_at(20000), 0.001, 1e-15);  // held at min_lr past the end
  // Smooth per iteration: strictly decreasing inside an epoch.
  EXPECT_GT(s->lr_at(4500), s->lr_at(4501));
}

TEST(LrSchedule, LinearWarmupInEpochs) {
  // 5 epochs = 500 iterations from 0.01 * base up to base, multiplied into the cosine.
  auto s = build(R"({"name": "cosine", "warmup_epochs": 5, "warmup_start_factor": 0.01})");
  auto cosine = [](double t) { return 0.1 * (1 + std::cos(std::numbers::pi * t / 9000)) / 2; };
  EXPECT_NEAR(s->lr_at(0), 0.001, 1e-15);                            // start: start_factor * base
  EXPECT_NEAR(s->lr_at(250), (0.01 + 0.99 * 0.5) * cosine(250), 1e-15);  // halfway up
  EXPECT_NEAR(s->lr_at(499), (0.01 + 0.99 * 499 / 500) * cosine(499), 1e-15);
  EXPECT_NEAR(s->lr_at(500), cosine(500), 1e-15);                    // end: factor 1
  EXPECT_DOUBLE_EQ(s->warmup_factor(500), 1.0);
  EXPECT_DOUBLE_EQ(s->warmup_factor(100000), 1.0);
}

TEST(LrSchedule, WarmupInStepsKeepsMilestonesAbsolute) {
  auto s = build(R"({"name": "multistep", "milestones": [2], "gamma": 0.1, "warmup_steps": 300})");
  EXPECT_NEAR(s->lr_at(0), 0.01, 1e-15);                   // default start factor 0.1
  EXPECT_NEAR(s->lr_at(150), 0.1 * 0.55, 1e-15);
  EXPECT_NEAR(s->lr_at(199), 0.1 * (0.1 + 0.9 * 199 / 300), 1e-15);
  EXPECT_NEAR(s->lr_at(200), 0.01 * (0.1 + 0.9 * 200 / 300), 1e-15);  // milestone at epoch 2 during warm-up
  EXPECT_NEAR(s->lr_at(300), 0.01, 1e-15);
  auto step = build(R"({"name": "step", "step_size": 1, "gamma": 0.5, "warmup_epochs": 0.5})");
  EXPECT_NEAR(step->lr_at(0), 0.01, 1e-15);
  EXPECT_NEAR(step->lr_at(50), 0.1, 1e-15);   // half an epoch = 50 iterations
  EXPECT_NEAR(step->lr_at(100), 0.05, 1e-15);
}

TEST(LrSchedule, JsonRoundTrip) {
  for (const char* text : {R"({"name": "constant", "warmup_steps": 7})",
                           R"({"name": "step", "step_size": 3, "gamma": 0.5, "warmup_epochs": 1.5})",
                           R"({"name": "multistep", "milestones": [3, 9], "gamma": 0.3, "warmup_start_factor": 0.2, "warmup_epochs": 1})",
                           R"({"name": "cosine", "min_lr": 1e-5})",
                           R"({"name": "poly", "power": 1.5, "end_lr": 1e-3, "warmup_epochs": 2, "warmup_start_factor": 0})"}) {
    auto a = build(text);
    json j = a->to_json();
    auto b = make_schedule(j, kCtx);
    EXPECT_EQ(b->to_json(), j) << text;
    for (int64_t t : {0, 1, 99, 100, 149, 150, 299, 900, 8999}) EXPECT_EQ(a->lr_at(t), b->lr_at(t)) << text << " " << t;
    json given = json::parse(text);
    for (auto [key, value] : given.items()) EXPECT_EQ(j[key], value) << key;
  }
  EXPECT_EQ(MultiStepLROptions{}.to_json()["milestones"], (json{30, 60, 90}));
  EXPECT_EQ(schedule_names(), (std::vector<std::string>{"constant", "step", "multistep", "cosine", "poly"}));
}

// MLPerf's ResNet-50 LARS schedule (power 2, end_lr 1e-4, warm-up from 0 over W steps), written out
// here: lr = base * t / W for t < W, then end + (base - end) * (1 - (t - W) / (T - W))^2.
TEST(LrSchedule, PolyAgainstTheFormula) {
  const ScheduleContext c{10.0, 100, 37};  // base 10, 100 iterations per epoch, 37 epochs: 3700 steps
  auto s = make_schedule(json::parse(R"({"name": "poly", "warmup_epochs": 2, "warmup_start_factor": 0})"), c);
  const double base = 10.0, end = 1e-4, W = 200, T = 3700;
  auto want = [&](double t) {
    if (t < W) return base * t / W;
    const double f = 1 - (std::min(t, T) - W) / (T - W);
    return end + (base - end) * f * f;
  };
  for (int64_t t : {0, 1, 100, 199, 200, 201, 1000, 1950, 3000, 3698, 3699, 3700, 5000})
    EXPECT_NEAR(s->lr_at(t), want(static_cast<double>(t)), 1e-12 * base) << "step " << t;
  // The warm-up joint: both sides meet base; the decay has barely begun one step later.
  EXPECT_NEAR(s->lr_at(199), base * 199 / 200, 1e-12);
  EXPECT_DOUBLE_EQ(s->lr_at(200), base);
  EXPECT_LT(s->lr_at(201), base);
  EXPECT_GT(s->lr_at(201), base * (1 - 2.0 / 3500));
  // The last step of the run is one decay step above end_lr; from T on it stays at end_lr.
  EXPECT_NEAR(s->lr_at(3699), end + (base - end) / (3500.0 * 3500.0), 1e-15);
  EXPECT_DOUBLE_EQ(s->lr_at(3700), end);
  EXPECT_DOUBLE_EQ(s->lr_at(1000000), end);
  // Defaults are MLPerf's: power 2, end_lr 0.0001.
  EXPECT_EQ(PolyLROptions{}.to_json()["power"], 2.0);
  EXPECT_EQ(PolyLROptions{}.to_json()["end_lr"], 1e-4);
  // Other powers, no warm-up: linear decay to end_lr over the whole run.
  auto lin = make_schedule(json::parse(R"({"name": "poly", "power": 1, "end_lr": 0})"), c);
  EXPECT_DOUBLE_EQ(lin->lr_at(0), base);
  EXPECT_NEAR(lin->lr_at(1850), base / 2, 1e-12);
  EXPECT_DOUBLE_EQ(lin->lr_at(3700), 0.0);
}

TEST(LrSchedule, ConfigErrors) {
  expect_error(R"({"name": "poly", "end_lr": 0.5})", "end_lr = 0.5 is not accepted; accepted: 0..0.1");
  expect_error(R"({"name": "poly", "power": -1})", "schedule.power = -1 is out of range");
  expect_error(R"({"name": "poly", "min_lr": 0})", "unknown key schedule.min_lr");
  expect_error(R"({"name": "cosin"})", "schedule.name = \"cosin\" is not a learning-rate schedule (did you mean \"cosine\"?); accepted: constant, step, multistep, cosine, poly");
  expect_error(R"({"gamma": 0.1})", "schedule.name is required; accepted: constant, step, multistep, cosine, poly");
  expect_error(R"({"name": "step", "step_sise": 3})", "unknown key schedule.step_sise (did you mean schedule.step_size?)");
  expect_error(R"({"name": "cosine", "milestones": [3]})", "unknown key schedule.milestones");
  expect_error(R"({"name": "multistep", "milestones": [30, 20]})", "must be strictly increasing");
  expect_error(R"({"name": "multistep", "milestones": [0, 20]})", "must be an epoch >= 1");
  expect_error(R"({"name": "multistep", "milestones": "30"})", "schedule.milestones must be a list");
  expect_error(R"({"name": "step", "step_size": 0})", "schedule.step_size = 0 is out of range");
  expect_error(R"({"name": "step", "gamma": "x"})", "schedule.gamma must be a number");
  expect_error(R"({"name": "cosine", "warmup_epochs": 1, "warmup_steps": 10})", "are both set");
  expect_error(R"({"name": "constant", "warmup_start_factor": 2})", "schedule.warmup_start_factor = 2 is out of range");
  EXPECT_THROW(make_schedule(json::parse(R"({"name": "constant"})"), {0.1, 0, 10}), Error);  // steps_per_epoch 0
  EXPECT_THROW(build(R"({"name": "constant"})")->lr_at(-1), Error);
}
