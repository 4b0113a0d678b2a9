// train.early_stopping, train.best_metric and train.threads on tiny runs (tools/engine/metric_watch.h,
// docs/training.md "Early stopping", "The best checkpoint", "Threads on the CPU"): a run whose figures
// stall (the learning rate drops to 0 after the first epochs, a model without batch norm: every later
// evaluation is the same) stops at the epoch the patience gives, says so, records the stop, and its
// resume is refused until the patience is raised or early stopping dropped; an interrupted run counts
// the patience across the interruption (epoch end and mid-epoch); two replicas stop together;
// best_metric = loss / ema_loss picks the epoch of the lowest loss in metrics.jsonl and keeps its
// best across a resume; train.threads sets the training thread's OpenMP threads, OMP_NUM_THREADS
// wins; bad values are refused naming the key.
#include <gtest/gtest.h>

#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/comm.h"
#include "models/registry.h"
#include "tests/expect_error.h"
#include "tools/engine/training_checkpoint.h"
#include "tools/deploy/config.h"
#include "tools/engine/trainer.h"

using namespace kiln;
using kiln::testing::error_of;
namespace fs = std::filesystem;

namespace {

// 192 samples in batches of 32: 6 steps an epoch. No batch norm, so weights that stop moving give
// the same evaluation every epoch: from epoch `frozen_after` + 1 on the lr is 0 (multistep, gamma 0).
json config(const std::string& runs, const std::string& name, int64_t frozen_after) {
  json c = json::parse(R"({
    "model": {"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1},
      {"type": "relu"},
      {"type": "max_pool2d", "kernel_size": 2},
      {"type": "flatten"},
      {"type": "linear", "in_features": 128, "out_features": 4}]},
    "data": {"source": "synthetic", "synthetic": {"size": 192, "height": 8, "width": 8, "channels": 3, "num_classes": 4},
             "batch_size": 32, "workers": 0},
    "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
    "train": {"epochs": 8, "seed": 3, "plots": false, "tensorboard": false, "comm_timeout_s": 30}
  })");
  c["name"] = name;
  c["train"]["runs_dir"] = runs;
  c["schedule"] = {{"name", "multistep"}, {"milestones", {frozen_after}}, {"gamma", 0.0}};
  return c;
}

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_watch_" + name;
  fs::remove_all(d);
  return d;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The run's `last` training state.
TrainingState last_state(const std::string& run_dir, const json& c) {
  auto model = models::build_model(c["model"], "model");
  return load_checkpoint(resolve_checkpoint(run_dir), *model);
}

// `run`'s own config.json with overrides, resuming it (as `kiln train RUN key=value ...`; a run
// stopped by train.stop_after records it: train.stop_after=0 trains on to train.epochs).
json resume_config(const std::string& run, const std::vector<std::string>& overrides) {
  json c = load_config_file(run + "/config.json");
  apply_overrides(c, {"resume=" + run});
  apply_overrides(c, overrides);
  return c;
}

// metrics.jsonl's epoch rows.
std::vector<json> epoch_rows(const std::string& run_dir) {
  std::vector<json> rows;
  std::ifstream f(run_dir + "/metrics.jsonl");
  for (std::string l; std::getline(f, l);) {
    json j = json::parse(l);
    if (j.value("kind", "") == "epoch") rows.push_back(j);
  }
  return rows;
}

// The 1-based epoch of the first lowest (`lowest`) or highest value of `key` in the epoch rows.
int64_t first_extreme_epoch(const std::vector<json>& rows, const std::string& key, bool lowest) {
  size_t at = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    const double v = rows[i][key].get<double>(), b = rows[at][key].get<double>();
    if (lowest ? v < b : v > b) at = i;
  }
  return rows[at]["epoch"].get<int64_t>();
}

// A run folder holding only the checkpoint `pair` (a last-<step> folder) of `run` as its `last`.
std::string run_from_pair(const std::string& run, const std::string& pair, const std::string& to) {
  fs::create_directories(to);
  for (const char* f : {"config.json", "classes.json"}) fs::copy_file(run + "/" + f, to + "/" + f);
  fs::copy(run + "/" + pair, to + "/" + pair, fs::copy_options::recursive);
  fs::create_directory_symlink(pair, to + "/last");
  return to;
}

}  // namespace

// The lr is 0 after epoch 1: the val loss of epochs 2, 3, ... equals epoch 1's, so with patience 2
// the run stops after epoch 3 of 8, ending as at its end (last checkpoint, report), with its line.
TEST(EarlyStopping, StopsWhenTheFigureStallsSavesAndSaysWhy) {
  const std::string runs = fresh_dir("stall");
  json c = config(runs, "stall", 1);
  apply_overrides(c, {"train.early_stopping={\"metric\": \"loss\", \"patience\": 2}"});
  const TrainResult r = train(c, /*quiet=*/false);
  EXPECT_EQ(r.stopped_early, 3);
  EXPECT_EQ(r.epochs, 8);
  EXPECT_EQ(r.steps, 3 * 6);
  EXPECT_EQ(epoch_rows(r.run_dir).size(), 3u);
  EXPECT_TRUE(fs::exists(r.run_dir + "/report.csv")) << "the final report is written after an early stop";
  const TrainingState s = last_state(r.run_dir, c);
  EXPECT_EQ(s.epoch, 3);
  EXPECT_EQ(s.stopped_early, 3);
  EXPECT_EQ(s.early_stopping.metric, "loss");
  EXPECT_EQ(s.early_stopping.epoch, 1);
  const std::string log = read_text(r.run_dir + "/train.log");
  EXPECT_HAS(log, "early stopping: val loss has not improved for 2 epochs (best ");
  EXPECT_HAS(log, " at epoch 1); stopped after epoch 3 of 8");
}

// A run that stopped early is not resumed silently: refused with advice; a higher patience trains on
// until it is spent (epoch 5 = best epoch 1 + 4); without early stopping it trains to its end.
TEST(EarlyStopping, ResumingAStoppedRunIsRefusedUntilThePatienceIsRaisedOrDropped) {
  const std::string runs = fresh_dir("resume_stopped");
  json c = config(runs, "stopped", 1);
  apply_overrides(c, {"train.early_stopping={\"metric\": \"top1\", \"patience\": 2, \"min_delta\": 0.001}"});
  const TrainResult r = train(c, true);
  ASSERT_EQ(r.stopped_early, 3);
  const std::string msg = error_of([&] { train(resume_config(r.run_dir, {}), true); });
  EXPECT_HAS(msg, "stopped early after epoch 3 of 8");
  EXPECT_HAS(msg, "val top1 has not improved by more than 0.001 for 2 epochs");
  EXPECT_HAS(msg, "train.early_stopping.patience=4");
  EXPECT_HAS(msg, "train.early_stopping=null");
  EXPECT_EQ(last_state(r.run_dir, c).epoch, 3) << "the refusal trained nothing";

  const TrainResult more = train(resume_config(r.run_dir, {"train.early_stopping.patience=4"}), true);
  EXPECT_EQ(more.stopped_early, 5);
  EXPECT_EQ(more.steps, 5 * 6);
  const TrainResult rest = train(resume_config(r.run_dir, {"train.early_stopping=null"}), true);
  EXPECT_EQ(rest.stopped_early, 0);
  EXPECT_EQ(rest.steps, 8 * 6);
  EXPECT_EQ(last_state(r.run_dir, c).stopped_early, 0);
}

// The lr is 0 after epoch 2, patience 3: the run stops 3 epochs after its best (epoch 1 or 2). Runs
// interrupted after epoch 3 and inside epoch 4 (a mid-epoch checkpoint), then resumed, stop at the
// same epoch with the same record: the count is in the checkpoint (a count that restarted at the
// resume would stop at epoch 7 or later).
TEST(EarlyStopping, PatienceCountsAcrossAnInterruption) {
  const std::string runs = fresh_dir("across");
  auto cfg = [&](const std::string& name) {
    json c = config(runs, name, 2);
    apply_overrides(c, {"train.early_stopping={\"metric\": \"loss\", \"patience\": 3}", "train.save_every_steps=3",
                        "train.keep_last=100"});
    return c;
  };
  const TrainResult straight = train(cfg("straight"), true);
  const TrainingState ss = last_state(straight.run_dir, cfg("x"));
  ASSERT_LE(ss.early_stopping.epoch, 2);
  ASSERT_EQ(straight.stopped_early, ss.early_stopping.epoch + 3) << "stops 3 epochs after its best, inside the 8";

  json first = cfg("split");
  apply_overrides(first, {"train.stop_after=3"});
  const TrainResult b1 = train(first, true);
  EXPECT_EQ(b1.stopped_early, 0);
  const TrainResult b2 = train(resume_config(b1.run_dir, {"train.stop_after=0"}), true);
  // From the mid-epoch checkpoint at step 21 (epoch 4, batch 3 of 6) of the straight run.
  const std::string mid = run_from_pair(straight.run_dir, "last-21", runs + "/from-21");
  const TrainResult b3 = train(resume_config(mid, {}), true);
  for (const TrainResult* r : {&b2, &b3}) {
    EXPECT_EQ(r->stopped_early, straight.stopped_early) << r->run_dir;
    EXPECT_EQ(r->steps, straight.steps) << r->run_dir;
    const TrainingState s = last_state(r->run_dir, cfg("x"));
    EXPECT_EQ(s.early_stopping.epoch, ss.early_stopping.epoch) << r->run_dir;
    EXPECT_EQ(s.early_stopping.best, ss.early_stopping.best) << r->run_dir;
    EXPECT_EQ(s.stopped_early, ss.stopped_early) << r->run_dir;
  }
}

// Two replicas (threads, CPU): both stop after the same epoch (a replica that went on would wait in
// a collective until train.comm_timeout_s and fail the run).
TEST(EarlyStopping, ReplicasStopTogether) {
  const std::string runs = fresh_dir("replicas");
  json c = config(runs, "replicas", 1);
  apply_overrides(c, {"train.early_stopping={\"metric\": \"top1\", \"patience\": 2}"});
  const TrainResult r = train_replicas(c, {Device::cpu(), Device::cpu()}, make_thread_communicators(2), true);
  EXPECT_EQ(r.stopped_early, 3);
  EXPECT_EQ(r.steps, 3 * 6);
}

// best_metric = loss: `best` is the epoch of the lowest val_loss in metrics.jsonl (top1, the
// default: the first epoch of the highest val_top1); ema_loss: the lowest ema_val_loss.
TEST(BestMetric, PicksTheEpochOfTheBestFigureInMetricsJsonl) {
  const std::string runs = fresh_dir("best");
  for (const char* metric : {"loss", "top1", "ema_loss"}) {
    json c = config(runs, metric, 100);  // never frozen
    apply_overrides(c, {"train.epochs=6", "optim.lr=0.5", std::string("train.best_metric=") + metric});
    if (std::string(metric) == "ema_loss") apply_overrides(c, {"train.ema={\"decay\": 0.9}"});
    const TrainResult r = train(c, true);
    const std::vector<json> rows = epoch_rows(r.run_dir);
    ASSERT_EQ(rows.size(), 6u);
    const std::string key = std::string(metric) == "ema_loss" ? "ema_val_loss" : "val_" + std::string(metric);
    const int64_t want = first_extreme_epoch(rows, key, std::string(metric) != "top1");
    auto model = models::build_model(c["model"], "model");
    const TrainingState best = load_checkpoint(resolve_checkpoint(r.run_dir + "/best"), *model);
    EXPECT_EQ(best.epoch, want) << metric;
    EXPECT_EQ(best.best.metric, metric);
    EXPECT_EQ(best.best.epoch, want) << metric;
    EXPECT_NEAR(best.best.best, rows[static_cast<size_t>(want - 1)][key].get<double>(), 1e-6) << metric;
    EXPECT_EQ(last_state(r.run_dir, c).best.epoch, want) << metric << ": the last checkpoint carries the record";
  }
}

// The best value survives a resume: the lr is 0 after epoch 2, so epochs 3.. equal epoch 2's loss
// and never beat the best (epoch 1 or 2). A run resumed after epoch 3 keeps that `best`; had it
// forgotten the value, epoch 4's equal loss would have become the best.
TEST(BestMetric, TheBestValueSurvivesAResume) {
  const std::string runs = fresh_dir("best_resume");
  json c = config(runs, "split", 2);
  apply_overrides(c, {"train.epochs=5", "train.best_metric=loss", "train.stop_after=3"});
  const TrainResult first = train(c, true);
  const int64_t best_epoch = last_state(first.run_dir, c).best.epoch;
  ASSERT_LE(best_epoch, 2);
  const TrainResult r = train(resume_config(first.run_dir, {"train.stop_after=0"}), true);
  EXPECT_EQ(r.steps, 5 * 6);
  auto model = models::build_model(c["model"], "model");
  EXPECT_EQ(load_checkpoint(resolve_checkpoint(r.run_dir + "/best"), *model).epoch, best_epoch);
  EXPECT_EQ(last_state(r.run_dir, c).best.epoch, best_epoch);
}

// train.threads sets the training thread's OpenMP threads (oneDNN's too), recorded in the result,
// config.json and the run's header line; OMP_NUM_THREADS wins where set, and a line says so.
TEST(TrainThreads, SetsOpenMPThreadsRecordsThemAndOMPNumThreadsWins) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  const std::string saved_env = env ? env : "";
  const int before = omp_get_max_threads();
  ::unsetenv("OMP_NUM_THREADS");
  const std::string runs = fresh_dir("threads");
  const int want = before == 3 ? 2 : 3;
  json c = config(runs, "threads", 100);
  apply_overrides(c, {"train.epochs=1", "train.threads=" + std::to_string(want)});
  const TrainResult r = train(c, /*quiet=*/false);
  EXPECT_EQ(omp_get_max_threads(), want);
  EXPECT_EQ(r.threads, want);
  EXPECT_EQ(load_config_file(r.run_dir + "/config.json")["train"]["threads"], want);
  EXPECT_HAS(read_text(r.run_dir + "/train.log"), ", " + std::to_string(want) + " CPU threads (train.threads) -> ");

  ::setenv("OMP_NUM_THREADS", "1", 1);
  const TrainResult e = train(c, false);
  EXPECT_EQ(omp_get_max_threads(), 1);
  EXPECT_EQ(e.threads, 1);
  EXPECT_EQ(load_config_file(e.run_dir + "/config.json")["train"]["threads"], 1);
  const std::string log = read_text(e.run_dir + "/train.log");
  EXPECT_HAS(log, "threads: OMP_NUM_THREADS=1 overrides train.threads = " + std::to_string(want) + ": 1 CPU threads");
  EXPECT_HAS(log, ", 1 CPU threads (OMP_NUM_THREADS) -> ");

  if (saved_env.empty()) ::unsetenv("OMP_NUM_THREADS");
  else ::setenv("OMP_NUM_THREADS", saved_env.c_str(), 1);
  omp_set_num_threads(before);
}

// Bad values of the three keys are refused naming the key and what is accepted.
TEST(TrainKeys, BadValuesAreRefusedNamingTheKey) {
  const std::string runs = fresh_dir("bad");
  struct Case {
    std::vector<std::string> overrides;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {{"train.threads=-1"}, {"train.threads = -1 is not accepted", "\"auto\""}},
      {{"train.threads=many"}, {"train.threads = \"many\" is not accepted"}},
      {{"train.threads=5000"}, {"train.threads = 5000", "at most 4096"}},
      {{"train.best_metric=acc"}, {"train.best_metric = \"acc\" is not accepted", "top1, top5, loss, ema_top1"}},
      {{"train.best_metric=ema_top1"}, {"train.best_metric = \"ema_top1\"", "train.ema is off"}},
      {{"train.ema={\"best_by\": \"ema\"}", "train.best_metric=loss"},
       {"train.best_metric = \"loss\"", "train.ema.best_by = \"ema\"", "\"ema_loss\""}},
      {{"train.early_stopping={\"metric\": \"loss\"}"}, {"train.early_stopping.patience is required"}},
      {{"train.early_stopping={\"patience\": 3}"}, {"train.early_stopping.metric is required"}},
      {{"train.early_stopping={\"metric\": \"loss\", \"patience\": 0}"}, {"train.early_stopping.patience = 0", "1..100000"}},
      {{"train.early_stopping={\"metric\": \"acc\", \"patience\": 2}"}, {"train.early_stopping.metric = \"acc\"", "top5"}},
      {{"train.early_stopping={\"metric\": \"ema_loss\", \"patience\": 2}"},
       {"train.early_stopping.metric = \"ema_loss\"", "train.ema is off"}},
      {{"train.early_stopping={\"metric\": \"top1\", \"patience\": 2, \"min_delta\": 1}"},
       {"train.early_stopping.min_delta = 1", "[0, 1)"}},
      {{"train.early_stopping={\"metric\": \"loss\", \"patience\": 2, \"min_delta\": -1}"},
       {"train.early_stopping.min_delta = -1"}},
      {{"train.early_stopping={\"metric\": \"loss\", \"patient\": 2}"}, {"did you mean 'patience'"}},
      {{"train.early_stopping=5"}, {"train.early_stopping = 5 is not accepted", "\"patience\""}},
  };
  for (const Case& k : cases) {
    json c = config(runs, "bad", 1);
    apply_overrides(c, k.overrides);
    const std::string msg = error_of([&] { check_config(c); });
    for (const std::string& e : k.expect) EXPECT_HAS(msg, e) << k.overrides.back();
  }
  // The accepted forms.
  json ok = config(runs, "ok", 1);
  apply_overrides(ok, {"train.threads=auto", "train.ema=true", "train.best_metric=ema_top5",
                       "train.early_stopping={\"metric\": \"ema_loss\", \"patience\": 1, \"min_delta\": 2.5}"});
  EXPECT_EQ(error_of([&] { check_config(ok); }), "");
  apply_overrides(ok, {"train.early_stopping=null", "train.threads=0", "train.ema={\"best_by\": \"ema\"}"});
  ok["train"].erase("best_metric");
  EXPECT_EQ(TrainOptions::from_json(ok["train"]).best_metric, "ema_top1") << "best_by = ema is ema_top1";
  EXPECT_EQ(TrainOptions::from_json(ok["train"]).threads, 0) << "\"0\": a config's \"auto\" kept the override's text";
  apply_overrides(ok, {"train.threads=4"});
  EXPECT_EQ(TrainOptions::from_json(ok["train"]).threads, 4);
}
