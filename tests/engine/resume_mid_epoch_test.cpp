// Resuming inside an epoch (tools/engine/interrupt.h, docs/training.md "Interrupting and resuming"):
// a run that saves every 2 steps (train.save_every_steps, keep_last large enough to keep them all) is
// resumed from each mid-epoch checkpoint, copied alone into a fresh run folder, and must end with the
// same bits as the run that was never stopped: weights, optimizer state and EMA, with accumulation,
// MixUp/CutMix, EMA, dropout and 0 or 2 loader workers. Also: the checkpoint's position and figures,
// keep_last's pruning, a stop request in-process, and a resume that changed the batch is refused.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "../expect_error.h"
#include "../resume_util.h"
#include "core/comm.h"
#include "models/registry.h"
#include "tools/engine/training_checkpoint.h"
#include "tools/deploy/config.h"
#include "tools/engine/interrupt.h"
#include "tools/engine/trainer.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// 192 samples in batches of 32: 6 steps per epoch, 3 epochs; saves at steps 2, 4, 8, 10, 14, 16
// (mid-epoch) and at each epoch's end.
json config(const std::string& runs, const std::string& name) {
  json c = json::parse(R"({
    "model": {"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1},
      {"type": "batch_norm2d", "num_features": 8},
      {"type": "relu"},
      {"type": "max_pool2d", "kernel_size": 2},
      {"type": "flatten"},
      {"type": "dropout", "p": 0.2},
      {"type": "linear", "in_features": 128, "out_features": 4}]},
    "data": {"source": "synthetic", "synthetic": {"size": 192, "height": 8, "width": 8, "channels": 3, "num_classes": 4},
             "train_transforms": [{"type": "random_crop", "size": 8, "padding": 1}, {"type": "horizontal_flip"}],
             "batch_size": 32, "workers": 2},
    "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 1e-4},
    "schedule": {"name": "cosine", "warmup_epochs": 0.5},
    "train": {"epochs": 3, "seed": 3, "plots": false, "save_every_steps": 2, "keep_last": 100}
  })");
  c["name"] = name;
  c["train"]["runs_dir"] = runs;
  return c;
}

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_mid_epoch_" + name;
  fs::remove_all(d);
  return d;
}

// A run folder holding only the checkpoint `pair` (a last-<step> folder) of `run` as its `last`.
std::string run_from_pair(const std::string& run, const std::string& pair, const std::string& to) {
  fs::create_directories(to);
  for (const char* f : {"config.json", "classes.json"}) fs::copy_file(run + "/" + f, to + "/" + f);
  fs::copy(run + "/" + pair, to + "/" + pair, fs::copy_options::recursive);
  fs::create_directory_symlink(pair, to + "/last");
  return to;
}

// Every mid-epoch checkpoint of `run`, resumed, ends as `run` did.
void expect_every_mid_epoch_resume_exact(const std::string& runs, const TrainResult& straight, bool ema) {
  auto model = models::build_model(config(runs, "x")["model"], "model");
  int resumed = 0;
  for (int64_t step : {2, 4, 8, 10, 14, 16}) {
    const std::string pair = straight.run_dir + "/last-" + std::to_string(step);
    ASSERT_TRUE(fs::is_directory(pair)) << pair << ": train.keep_last should have kept it";
    const TrainingState s = load_checkpoint(pair, *model);
    EXPECT_EQ(s.step, step);
    EXPECT_EQ(s.epoch, step / 6);
    EXPECT_EQ(s.epoch_step, step % 6);
    EXPECT_GT(s.progress.at("seen"), 0);
    EXPECT_EQ(s.progress.at("steps_per_epoch"), 6);
    const std::string run = run_from_pair(straight.run_dir, "last-" + std::to_string(step),
                                          runs + "/from-" + std::to_string(step));
    // The run's own config.json, as `kiln train RUN` reads it (it records data.seed as given: the
    // loaders mix train.seed into it once, not again on resume).
    json c = load_config_file(run + "/config.json");
    apply_overrides(c, {"resume=" + run});
    const TrainResult r = train(c, /*quiet=*/true);
    EXPECT_EQ(r.steps, straight.steps) << "from step " << step;
    EXPECT_EQ(r.epochs, 3);
    EXPECT_EQ(r.train_loss, straight.train_loss) << "from step " << step << ": the last epoch's mean loss";
    kiln::testing::expect_same_tensors(straight.run_dir, run, "last.safetensors");
    kiln::testing::expect_same_tensors(straight.run_dir, run, "last.state.safetensors");
    if (ema) kiln::testing::expect_same_tensors(straight.run_dir, run, "last.ema.safetensors");
    ++resumed;
  }
  EXPECT_EQ(resumed, 6);
}

}  // namespace

TEST(ResumeMidEpoch, EveryMidEpochCheckpointResumesBitExactly) {
  const std::string runs = fresh_dir("plain");
  const TrainResult straight = train(config(runs, "straight"), true);
  expect_every_mid_epoch_resume_exact(runs, straight, false);
}

TEST(ResumeMidEpoch, BitExactWithAccumulationMixupEmaAndNoWorkers) {
  const std::string runs = fresh_dir("features");
  const std::vector<std::string> features = {"train.accumulate=2", "data.workers=0", "train.ema=true",
                                             "train.mixup={\"mixup_alpha\": 0.4, \"cutmix_alpha\": 1.0, \"prob\": 0.8}"};
  json c = config(runs, "straight");
  apply_overrides(c, features);
  const TrainResult straight = train(c, true);
  expect_every_mid_epoch_resume_exact(runs, straight, true);
}

// keep_last = 2: the newest two pair folders stay; `last` names the newest.
TEST(ResumeMidEpoch, KeepLastPrunesOlderPairs) {
  const std::string runs = fresh_dir("keep");
  json c = config(runs, "keep");
  apply_overrides(c, {"train.keep_last=2", "train.epochs=2"});
  const TrainResult r = train(c, true);
  std::vector<std::string> pairs;
  for (const auto& e : fs::directory_iterator(r.run_dir))
    if (e.path().filename().string().rfind("last-", 0) == 0) pairs.push_back(e.path().filename().string());
  std::sort(pairs.begin(), pairs.end());
  EXPECT_EQ(pairs, (std::vector<std::string>{"last-10", "last-12"}));
  EXPECT_EQ(fs::read_symlink(r.run_dir + "/last").string(), "last-12");
}

// A stop request (as SIGINT under `kiln train`) ends the run after the step in flight with a saved
// mid-epoch checkpoint; resumed, it ends as the straight run.
TEST(ResumeMidEpoch, StopRequestSavesAndResumes) {
  const std::string runs = fresh_dir("stop");
  json c = config(runs, "stop");
  apply_overrides(c, {"train.save_every_steps=0"});
  request_signal(SIGINT);  // before the first step: the run stops after step 1
  const TrainResult stopped = train(c, true);
  request_signal(0);
  EXPECT_EQ(stopped.interrupted, SIGINT);
  EXPECT_EQ(stopped.steps, 1);
  auto model = models::build_model(c["model"], "model");
  const TrainingState s = load_checkpoint(resolve_checkpoint(stopped.run_dir), *model);
  EXPECT_EQ(s.step, 1);
  EXPECT_EQ(s.epoch_step, 1);
  EXPECT_FALSE(fs::exists(stopped.run_dir + "/metrics.csv") && fs::file_size(stopped.run_dir + "/metrics.csv") > 200)
      << "no epoch row for an epoch not ended";

  json straight = config(runs, "straight");
  apply_overrides(straight, {"train.save_every_steps=0"});
  const TrainResult a = train(straight, true);
  json again = config(runs, "stop");
  apply_overrides(again, {"train.save_every_steps=0", "resume=" + stopped.run_dir});
  const TrainResult b = train(again, true);
  EXPECT_EQ(b.interrupted, 0);
  EXPECT_EQ(b.steps, a.steps);
  kiln::testing::expect_same_tensors(a.run_dir, b.run_dir, "last.safetensors");
  kiln::testing::expect_same_tensors(a.run_dir, b.run_dir, "last.state.safetensors");
}

// A mid-epoch checkpoint resumed with another batch size (another number of steps per epoch) is
// refused, naming the position and what to do.
TEST(ResumeMidEpoch, ResumeWithAnotherEpochLengthIsRefused) {
  const std::string runs = fresh_dir("refuse");
  json c = config(runs, "refuse");
  apply_overrides(c, {"train.epochs=1"});
  const TrainResult r = train(c, true);
  const std::string run = run_from_pair(r.run_dir, "last-4", runs + "/from-4");
  json other = config(runs, "refuse");
  apply_overrides(other, {"data.batch_size=16", "resume=" + run});
  const std::string e = kiln::testing::error_of([&] { train(other, true); });
  EXPECT_NE(e.find("was saved mid-epoch"), std::string::npos) << e;
  EXPECT_NE(e.find("data.batch_size (32 -> 16)"), std::string::npos) << e;
}

// Two replicas (threads, as device=0,1): a stop request (made before any step) acts on both at the
// same step, the first where they agree (every 8 steps; tests/mpi has it reach one rank only); the
// saved run, resumed with two replicas, ends as the straight two-replica run.
TEST(ResumeMidEpoch, ReplicasAgreeOnTheStepTheyStopAt) {
  const std::string runs = fresh_dir("replicas");
  const std::vector<Device> cpus(2, Device::cpu());
  json c = config(runs, "stop");
  apply_overrides(c, {"train.save_every_steps=0", "train.eval_every=100"});  // no evaluation at step 6
  request_signal(SIGTERM);
  const TrainResult stopped = train_replicas(c, cpus, make_thread_communicators(2), true);
  request_signal(0);
  EXPECT_EQ(stopped.interrupted, SIGTERM);
  EXPECT_EQ(stopped.steps, 8);
  auto model = models::build_model(c["model"], "model");
  const TrainingState s = load_checkpoint(resolve_checkpoint(stopped.run_dir), *model);
  EXPECT_EQ(s.step, 8);
  EXPECT_EQ(s.epoch, 1);
  EXPECT_EQ(s.epoch_step, 2);

  json straight = config(runs, "straight");
  apply_overrides(straight, {"train.save_every_steps=0", "train.eval_every=100"});
  const TrainResult a = train_replicas(straight, cpus, make_thread_communicators(2), true);
  json again = load_config_file(stopped.run_dir + "/config.json");
  apply_overrides(again, {"resume=" + stopped.run_dir});
  const TrainResult b = train_replicas(again, cpus, make_thread_communicators(2), true);
  EXPECT_EQ(b.steps, a.steps);
  kiln::testing::expect_same_tensors(a.run_dir, b.run_dir, "last.safetensors");
  kiln::testing::expect_same_tensors(a.run_dir, b.run_dir, "last.state.safetensors");
}
