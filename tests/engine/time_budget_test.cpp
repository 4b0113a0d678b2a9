// train.time_budget_minutes (tools/engine/time_budget.h) and train.precision = "auto": the plan's
// arithmetic, and the trainer's decision on a tiny synthetic problem (bitwise against runs with
// fixed epochs, resume, refusals).
#include <gtest/gtest.h>

#include "../expect_error.h"

#include <filesystem>
#include <fstream>

#include "core/comm.h"
#include "core/dnnl_context.h"
#include "core/io/safetensors.h"
#include "tools/deploy/config.h"
#include "tools/engine/time_budget.h"
#include "tools/engine/trainer.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// 192 samples in batches of 32: 6 steps per epoch, so the decision is at the end of the first epoch.
json budget_config(const std::string& runs, const std::string& schedule) {
  json c = json::parse(R"({
    "name": "budget",
    "model": {"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1},
      {"type": "batch_norm2d", "num_features": 4},
      {"type": "relu"},
      {"type": "flatten"},
      {"type": "linear", "in_features": 256, "out_features": 3}]},
    "data": {"source": "synthetic", "synthetic": {"size": 192, "height": 8, "width": 8, "channels": 3, "num_classes": 3},
             "train_transforms": [{"type": "horizontal_flip"}], "batch_size": 32, "workers": 1},
    "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "train": {"epochs": 3, "seed": 5, "plots": false, "ema": {"decay": 0.9}, "tta": "flip"}
  })");
  c["schedule"] = json{{"name", schedule}};
  c["train"]["runs_dir"] = runs;
  return c;
}

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_budget_" + name;
  fs::remove_all(d);
  return d;
}

json run_config(const std::string& run_dir) {
  std::ifstream f(run_dir + "/config.json");
  return json::parse(f);
}

void expect_same_weights(const std::string& a, const std::string& b) {
  auto wa = load_safetensors(a + "/last.safetensors").tensors;
  auto wb = load_safetensors(b + "/last.safetensors").tensors;
  ASSERT_EQ(wa.size(), wb.size());
  for (auto& [name, t] : wa) EXPECT_EQ(t.to_double_vector(), wb.at(name).to_double_vector()) << name;
}

int metrics_rows(const std::string& run_dir) {
  std::ifstream csv(run_dir + "/metrics.csv");
  int lines = 0;
  for (std::string l; std::getline(csv, l);) ++lines;
  return lines - 1;
}

using kiln::testing::error_of;

}  // namespace

TEST(TimeBudget, DecisionStepIsATenthOfTheFirstEpochWithinBounds) {
  const int64_t least = kUntimedSteps + kMinMeasuredSteps;
  EXPECT_EQ(budget_decision_step(469), 46);        // Fashion-MNIST at batch 128
  EXPECT_EQ(budget_decision_step(5005), 500);      // ImageNet at batch 256
  EXPECT_EQ(budget_decision_step(100), least);     // at least the timed steps
  EXPECT_EQ(budget_decision_step(6), 6);           // at most the first epoch
  EXPECT_EQ(budget_decision_step(1), 1);
}

TEST(TimeBudget, PlanPicksTheMostEpochsThatFit) {
  BudgetInput in;
  in.budget_s = 100;
  in.elapsed_s = 10;
  in.steps_done = 5;
  in.steps_per_epoch = 10;
  in.max_epochs = 20;
  in.step_s = 1;
  in.eval_s = 2;
  in.margin = 0;
  // 10 + (10 N - 5) + 2 N: N = 7 takes 89 s, N = 8 takes 101 s.
  EXPECT_DOUBLE_EQ(predicted_run_seconds(in, 7), 89);
  BudgetPlan p = plan_budget(in);
  EXPECT_EQ(p.epochs, 7);
  EXPECT_TRUE(p.fits);
  EXPECT_DOUBLE_EQ(p.predicted_s, 89);

  // Evaluations every third epoch and after the last: N = 8 evaluates 3 times, 10 + 75 + 6 = 91 s.
  in.eval_every = 3;
  EXPECT_EQ(plan_budget(in).epochs, 8);
  in.eval_every = 1;

  // The final test-time augmentation and the margin count against the budget.
  in.final_extra_s = 12;  // N = 6: 10 + 55 + 12 + 12 = 89
  EXPECT_EQ(plan_budget(in).epochs, 6);
  in.final_extra_s = 0;
  in.margin = 0.2;  // 80 s: N = 6 takes 77
  EXPECT_EQ(plan_budget(in).epochs, 6);
  in.margin = 0;

  // At most max_epochs; at least one, flagged when even that does not fit.
  in.max_epochs = 4;
  EXPECT_EQ(plan_budget(in).epochs, 4);
  in.budget_s = 15;
  p = plan_budget(in);
  EXPECT_EQ(p.epochs, 1);
  EXPECT_FALSE(p.fits);
  EXPECT_NE(describe_budget(in, p).find("even one epoch is predicted over the budget"), std::string::npos);

  in.budget_s = 0;
  EXPECT_FALSE(error_of([&] { plan_budget(in); }).empty());
}

// A later epoch's check: the evaluations still to come, at least one more epoch, more epochs only
// in the first half of the run and up to train.epochs.
TEST(TimeBudget, RecheckLowersTheEpochsOnlyWhenTheRunWouldOverrun) {
  BudgetInput in;
  in.budget_s = 100;
  in.elapsed_s = 50;
  in.steps_done = 50;  // 5 epochs of 10 steps done
  in.epochs_done = 5;
  in.steps_per_epoch = 10;
  in.max_epochs = 10;  // the run's current epochs
  in.step_s = 1;
  in.eval_s = 2;
  in.margin = 0;
  // 50 + 10 (N - 5) + 2 (N - 5): 10 epochs take 110 s, 9 take 98 s.
  EXPECT_DOUBLE_EQ(predicted_run_seconds(in, 10), 110);
  EXPECT_EQ(recheck_budget(in), 9);
  EXPECT_NE(describe_recheck(in, 9).find("10 -> 9 epochs after epoch 5"), std::string::npos) << describe_recheck(in, 9);
  in.step_s = 0.8;  // 50 + 40 + 10 = 100 s: past 99% of the budget, lowered to what fits 98%: 9 (90 s)
  in.margin = 0.02;
  EXPECT_EQ(recheck_budget(in), 9);
  in.margin = 0;
  in.step_s = 0.7;  // 95 s: within 99%, kept
  EXPECT_EQ(recheck_budget(in), 10);
  in.step_s = 0.01;  // far within: kept (train.epochs is 10)
  EXPECT_EQ(recheck_budget(in), 10);
  // Raised up to train.epochs when more fit, in the first half of the run only: 5 of 10 done, train.epochs
  // 20, 0.5 s/step: 50 + 5 (N - 5) + 2 (N - 5) <= 100 up to N = 12.
  in.cap_epochs = 20;
  in.step_s = 0.5;
  EXPECT_EQ(recheck_budget(in), 12);
  EXPECT_NE(describe_recheck(in, 12).find("10 -> 12 epochs after epoch 5"), std::string::npos);
  in.margin = 0.02;  // raised to what fits the budget less twice the margin: 96 s, N = 11
  EXPECT_EQ(recheck_budget(in), 11);
  in.margin = 0;
  in.cap_epochs = 11;  // at most train.epochs
  EXPECT_EQ(recheck_budget(in), 11);
  in.cap_epochs = 20;
  in.max_epochs = 9;  // 5 of 9 done: past the first half, not raised
  EXPECT_EQ(recheck_budget(in), 9);
  in.max_epochs = 10;
  in.cap_epochs = 0;
  // Only the evaluations after epoch 5 count: every third epoch, 10 evaluates at 6, 9 and 10.
  in.step_s = 1;
  in.eval_every = 3;
  EXPECT_DOUBLE_EQ(predicted_run_seconds(in, 10), 50 + 50 + 6);
  in.eval_every = 1;
  // Even one more epoch over the budget: one more (the schedule ends), flagged.
  in.budget_s = 55;
  EXPECT_EQ(recheck_budget(in), 6);
  EXPECT_FALSE(plan_budget(in).fits);
  // The speed a recheck uses: the median of the last three epochs' seconds per step, the decision's
  // (the second argument) standing in for epochs not yet run.
  EXPECT_DOUBLE_EQ(budget_recent_step_s({0.3}, 0.1), 0.1);       // one slow epoch moves nothing
  EXPECT_DOUBLE_EQ(budget_recent_step_s({0.3, 0.25}, 0.1), 0.25);  // two of three: the slowdown lasts
  EXPECT_DOUBLE_EQ(budget_recent_step_s({0.5, 0.1, 0.2, 0.3}, 0.1), 0.2);
  EXPECT_DOUBLE_EQ(budget_recent_step_s({0.5, 0.1, 0.9, 0.1}, 0.5), 0.1);
  EXPECT_FALSE(error_of([&] { budget_recent_step_s({}, 0.1); }).empty());
  // A decision cannot be asked for fewer epochs than are done.
  in.epochs_done = 10;
  EXPECT_FALSE(error_of([&] { plan_budget(in); }).empty());
}

// The run that made the first recheck robust (configs/fashion_mnist_fast.json on a 2-core Xeon,
// 2026-12-07): 28 epochs decided at 0.1297 s/step; a compile on the same machine slowed the first
// epoch after the decision's to 0.196 s/step, and the recheck after it, on that epoch alone, cut the
// run to 18 epochs (a cosine rebuilt for 18, raised again to 21-27 over the next epochs). Now one slow
// epoch is outvoted by the decision's speed (only the time it took is counted); a slowdown that
// persists for a second epoch still lowers.
TEST(TimeBudget, OneSlowEpochAfterTheDecisionDoesNotCutTheRun) {
  BudgetInput in;
  in.budget_s = 1800;
  in.steps_per_epoch = 469;
  in.max_epochs = 28;
  in.cap_epochs = 40;
  in.eval_every = 4;
  in.eval_s = 6.22;
  in.final_extra_s = 2 * in.eval_s;
  in.epochs_done = 2;
  in.steps_done = 2 * 469;
  in.elapsed_s = 6 + 469 * 0.1297 + 469 * 0.196;  // set-up, the decision's epoch, the slow one
  in.step_s = budget_recent_step_s({0.196}, 0.1297);
  EXPECT_DOUBLE_EQ(in.step_s, 0.1297);
  EXPECT_EQ(recheck_budget(in), 27);  // the slow epoch's own 31 s are spent: one epoch fewer, not ten
  in.step_s = 0.196;  // what the recheck predicted with before: the run lowered to 18
  EXPECT_EQ(recheck_budget(in), 18);
  // The machine stays slow for a third epoch: the median is the slow speed, and the run is lowered.
  in.epochs_done = 3;
  in.steps_done = 3 * 469;
  in.elapsed_s += 469 * 0.196;
  in.step_s = budget_recent_step_s({0.196, 0.196}, 0.1297);
  EXPECT_DOUBLE_EQ(in.step_s, 0.196);
  EXPECT_LT(recheck_budget(in), 28);
  EXPECT_LE(predicted_run_seconds(in, recheck_budget(in)), in.budget_s * (1 - kBudgetMargin));
}

// A machine that slows down after the decision (simulated on the budget's clock): the next epoch's
// check lowers the epochs to what still fits, the schedule ends on the lowered epochs (the last lr
// is that of a run with them), and the run folder's config records them.
TEST(TimeBudget, SlowerMachineAfterTheDecisionLowersTheEpochs) {
  std::string runs = fresh_dir("slower");
  json plain = budget_config(runs, "cosine");
  plain["name"] = "plain5";
  apply_overrides(plain, {"epochs=5", "train.eval_every=2"});
  TrainResult a = train(plain, true);
  json budget = budget_config(runs, "cosine");
  // 6 steps per epoch, decided at the end of the first: 8 epochs fit 100,000 minutes (6e6 s). From
  // the decision on, each step counts 2e5 s more (1.2e6 s an epoch). After epoch 2 the median speed
  // is still the decision's (one slow epoch of three): 8 kept. After epoch 3 it is the slow one: 2.4e6 s
  // spent, N epochs predicted at 2.4e6 + 1.2e6 (N - 3) s, so 5 fit 98% of the budget.
  apply_overrides(budget, {"epochs=8", "train.eval_every=2", "train.time_budget_minutes=100000"});
  struct Slowdown {
    Slowdown() { set_budget_test_slowdown(2e5); }
    ~Slowdown() { set_budget_test_slowdown(0); }
  } slowdown;
  TrainResult b = train(budget, true);
  EXPECT_EQ(b.epochs, 5);
  EXPECT_EQ(metrics_rows(b.run_dir), 5);
  EXPECT_EQ(run_config(b.run_dir)["train"]["epochs"], 5);
  std::ifstream ca(a.run_dir + "/metrics.csv"), cb(b.run_dir + "/metrics.csv");
  std::string ra, rb;
  for (std::string l; std::getline(ca, l);) ra = l;
  for (std::string l; std::getline(cb, l);) rb = l;
  auto lr_of = [](const std::string& row) { return row.substr(row.find(',', row.find(',') + 1) + 1, 12); };
  EXPECT_EQ(lr_of(ra), lr_of(rb)) << ra << " / " << rb;
}

// A budget that the run fits changes nothing: the same weights as without one, every epoch.
TEST(TimeBudget, AmpleBudgetTrainsEveryEpochAsWithout) {
  std::string runs = fresh_dir("ample");
  json plain = budget_config(runs, "cosine");
  plain["name"] = "plain";
  TrainResult a = train(plain, true);
  json budget = budget_config(runs, "cosine");
  apply_overrides(budget, {"train.time_budget_minutes=100000"});
  TrainResult b = train(budget, true);
  EXPECT_EQ(b.epochs, 3);
  EXPECT_EQ(b.steps, a.steps);
  expect_same_weights(a.run_dir, b.run_dir);
  const json rc = run_config(b.run_dir);
  EXPECT_EQ(rc["train"]["epochs"], 3);
  EXPECT_EQ(rc["train"]["time_budget_minutes"], 0);  // decided: the config as run is the run
}

// A budget that one epoch already exceeds: one epoch, on the one-epoch schedule, recorded as such.
// Batches of 8: 24 steps per epoch, so the decision (after 23) comes before the epoch's last step.
TEST(TimeBudget, TinyBudgetTrainsTheEpochsThatFitOnTheirSchedule) {
  std::string runs = fresh_dir("tiny");
  ASSERT_EQ(budget_decision_step(24), 23);
  for (const char* sched : {"constant", "cosine"}) {
    json one = budget_config(runs, sched);
    one["name"] = std::string("one_") + sched;
    apply_overrides(one, {"epochs=1", "batch=8"});
    TrainResult a = train(one, true);
    json budget = budget_config(runs, sched);
    budget["name"] = std::string("budget_") + sched;
    apply_overrides(budget, {"train.time_budget_minutes=0.0001", "batch=8"});
    TrainResult b = train(budget, true);
    EXPECT_EQ(b.epochs, 1) << sched;
    EXPECT_EQ(metrics_rows(b.run_dir), 1) << sched;
    const json rc = run_config(b.run_dir);
    EXPECT_EQ(rc["train"]["epochs"], 1) << sched;
    EXPECT_EQ(rc["train"]["time_budget_minutes"], 0) << sched;
    // The last step's lr is the one-epoch schedule's (cosine: near its end, not a third of the way).
    std::ifstream ca(a.run_dir + "/metrics.csv"), cb(b.run_dir + "/metrics.csv");
    std::string ha, hb, ra, rb;
    std::getline(ca, ha), std::getline(ca, ra), std::getline(cb, hb), std::getline(cb, rb);
    auto lr_of = [](const std::string& row) { return row.substr(row.find(',', row.find(',') + 1) + 1, 12); };
    EXPECT_EQ(lr_of(ra), lr_of(rb)) << sched << ": " << ra << " / " << rb;
    // A constant schedule does not depend on the epochs: the very same run as epochs=1.
    if (std::string(sched) == "constant") expect_same_weights(a.run_dir, b.run_dir);
  }
}

// A resumed run keeps the epochs decided at its start, whatever the budget says then.
TEST(TimeBudget, ResumeKeepsTheDecidedEpochs) {
  std::string runs = fresh_dir("resume");
  json budget = budget_config(runs, "cosine");
  apply_overrides(budget, {"train.time_budget_minutes=0.0001"});
  TrainResult a = train(budget, true);
  ASSERT_EQ(a.epochs, 1);
  json again = budget;
  apply_overrides(again, {"resume=" + a.run_dir});
  EXPECT_NE(error_of([&] { train(again, true); }).find("has finished 1 epochs and train.epochs is 1"), std::string::npos);

  // Interrupted after the decision (stop_after), resumed under the budget: as one straight run.
  json straight = budget_config(runs, "cosine");
  straight["name"] = "straight";
  apply_overrides(straight, {"train.time_budget_minutes=100000"});
  TrainResult s = train(straight, true);
  json first = budget_config(runs, "cosine");
  first["name"] = "split";
  apply_overrides(first, {"train.time_budget_minutes=100000", "train.stop_after=1"});
  TrainResult f = train(first, true);
  json second = budget_config(runs, "cosine");
  apply_overrides(second, {"train.time_budget_minutes=0.0001", "resume=" + f.run_dir});
  TrainResult g = train(second, true);
  EXPECT_EQ(g.epochs, 3);
  EXPECT_EQ(g.steps, s.steps);
  expect_same_weights(s.run_dir, g.run_dir);
}

// The checkpoint's epochs win over the config's when a budget is set: the schedule it follows.
TEST(TimeBudget, ResumeTakesTheCheckpointsEpochsOverTheConfigs) {
  std::string runs = fresh_dir("resume_epochs");
  json first = budget_config(runs, "cosine");
  apply_overrides(first, {"epochs=2", "train.stop_after=1"});
  TrainResult f = train(first, true);
  json second = budget_config(runs, "cosine");  // epochs 3 in the config
  apply_overrides(second, {"train.time_budget_minutes=100000", "resume=" + f.run_dir});
  TrainResult g = train(second, true);
  EXPECT_EQ(g.epochs, 2);
  EXPECT_EQ(metrics_rows(g.run_dir), 2);
}

// Several replicas: rank 0's decision (and precision "auto"'s) holds for every one, in one collective.
TEST(TimeBudget, ReplicasAgreeOnTheEpochsAndThePrecision) {
  std::string runs = fresh_dir("replicas");
  json c = budget_config(runs, "cosine");
  apply_overrides(c, {"train.time_budget_minutes=0.0001", "precision=auto", "batch=8"});
  TrainResult r = train_replicas(c, {Device::cpu(), Device::cpu()}, make_thread_communicators(2), /*quiet=*/true);
  EXPECT_EQ(r.epochs, 1);
  EXPECT_EQ(metrics_rows(r.run_dir), 1);
  // On a CPU with bf16 units the ranks measured and agreed (tests/cli/precision_auto_test.cpp); without, fp32.
  EXPECT_EQ(run_config(r.run_dir)["train"]["precision"], r.precision);
  if (!native_bf16(Device::cpu())) {
    EXPECT_EQ(r.precision, "fp32");
  } else {
    EXPECT_TRUE(r.precision == "bf16" || r.precision == "fp32") << r.precision;
  }
}

TEST(TimeBudget, SchedulesAtFixedEpochsAndProgressiveResizeAreRefused) {
  std::string runs = fresh_dir("refused");
  json multistep = budget_config(runs, "multistep");
  multistep["schedule"]["milestones"] = json::array({1, 2});
  apply_overrides(multistep, {"train.time_budget_minutes=5"});
  std::string m = error_of([&] { train(multistep, true); });
  EXPECT_NE(m.find("train.time_budget_minutes = 5 needs a schedule whose length follows train.epochs"), std::string::npos)
      << m;
  EXPECT_NE(m.find("\"multistep\""), std::string::npos) << m;

  json resize = budget_config(runs, "cosine");
  resize["data"]["progressive_resize"] = json{{"min_size", 4}, {"start_epoch", 0}, {"end_epoch", 2}};
  apply_overrides(resize, {"train.time_budget_minutes=5"});
  m = error_of([&] { train(resize, true); });
  EXPECT_NE(m.find("cannot be used with data.progressive_resize"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(runs + "/budget")) << "no run folder for a refused config";

  json negative = budget_config(runs, "cosine");
  apply_overrides(negative, {"train.time_budget_minutes=-1"});
  EXPECT_NE(error_of([&] { train(negative, true); }).find("train.time_budget_minutes"), std::string::npos);
}

TEST(Precision, AutoIsBf16WhereTheDeviceHasTheUnitsAndARunRecordsItsChoice) {
  // bf16 units: AVX-512 BF16 or AMX in oneDNN's effective ISA. Emulated bf16 (plain AVX-512, where
  // native_compute(bf16) is true) does not count; without AVX-512 there is no bf16 at all.
  EXPECT_EQ(native_bf16(Device::cpu()), onednn::bf16_units());
  if (onednn::bf16_units()) {
    EXPECT_TRUE(onednn::native_compute(DType::bf16));
  }
  const std::string cpu_choice = onednn::bf16_units() ? "bf16" : "fp32";
  EXPECT_EQ(resolve_precision("auto", Device::cpu()), cpu_choice);
  EXPECT_EQ(resolve_precision("fp16", Device::cpu()), "fp16");
  EXPECT_EQ(resolve_precision("fp32", Device::cuda(0)), "fp32");  // no GPU asked
  EXPECT_EQ(compute_dtype_of("auto", Device::cpu()), cpu_choice == "bf16" ? DType::bf16 : DType::f32);
  EXPECT_NE(error_of([] { compute_dtype_of("fp8", Device::cpu()); }).find("accepted: fp32, bf16, fp16, auto"),
            std::string::npos);

  // A run's "auto": without the units fp32; with them, the faster of its measured steps
  // (tests/cli/precision_auto_test.cpp). The run folder records the choice, so evaluating or resuming
  // it elsewhere computes the same way.
  std::string runs = fresh_dir("auto");
  json c = budget_config(runs, "constant");
  apply_overrides(c, {"precision=auto", "epochs=1"});
  TrainResult r = train(c, true);
  EXPECT_EQ(run_config(r.run_dir)["train"]["precision"], r.precision);
  if (cpu_choice == "fp32") {
    EXPECT_EQ(r.precision, "fp32");
  }
}
