// Signals to a real `kiln train` process (tools/engine/interrupt.h, docs/training.md "Interrupting
// and resuming"): SIGINT mid-epoch exits 130 with a saved checkpoint and the command that resumes,
// and the resumed run ends with the bits of the run that was never stopped; SIGTERM exits 143;
// SIGUSR1 saves and training goes on; a second signal exits at once without leaving a half pair; a
// signal during validation abandons it and the resumed run evaluates; a run folder whose config.json
// this kiln does not accept is refused, naming the key and the version that wrote it.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../kiln_process.h"
#include "../resume_util.h"
#include "core/io/safetensors.h"
#include "models/registry.h"
#include "tools/engine/training_checkpoint.h"

using namespace kiln;
namespace fs = std::filesystem;
namespace kt = kiln::testing;

namespace {

// 6 steps an epoch, 40 epochs, evaluated only at the end: a few seconds on one thread; every step
// prints a line (not a terminal: train.log_every).
json config(const std::string& runs, const std::string& name) {
  json c = json::parse(R"({
    "model": {"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 16, "kernel_size": 3, "padding": 1},
      {"type": "batch_norm2d", "num_features": 16},
      {"type": "relu"},
      {"type": "max_pool2d", "kernel_size": 2},
      {"type": "flatten"},
      {"type": "dropout", "p": 0.2},
      {"type": "linear", "in_features": 1024, "out_features": 4}]},
    "data": {"source": "synthetic", "synthetic": {"size": 192, "height": 16, "width": 16, "channels": 3, "num_classes": 4},
             "train_transforms": [{"type": "random_crop", "size": 16, "padding": 2}, {"type": "horizontal_flip"}],
             "batch_size": 32, "workers": 2},
    "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "schedule": {"name": "cosine"},
    "train": {"epochs": 40, "seed": 7, "plots": false, "log_every": 1, "eval_every": 1000, "tensorboard": false}
  })");
  c["name"] = name;
  c["train"]["runs_dir"] = runs;
  return c;
}

struct Case {
  std::string dir, runs, cfg, log;
};

Case make_case(const std::string& name, const json& c) {
  Case k;
  k.dir = ::testing::TempDir() + "kiln_interrupt_" + name;
  fs::remove_all(k.dir);
  fs::create_directories(k.dir);
  k.runs = k.dir + "/runs";
  k.cfg = k.dir + "/config.json";
  k.log = k.dir + "/kiln.log";
  std::ofstream(k.cfg) << c.dump(2);
  return k;
}

bool log_has(const std::string& log, const std::string& what) {
  return kt::file_tail(log, 1 << 20).find(what) != std::string::npos;
}

// Starts `kiln train CFG args...`, waits for `line` in its log, sends `sigs` (in order, at once), and
// returns the exit code.
int signal_when(const Case& k, const std::vector<std::string>& args, const std::string& line, std::vector<int> sigs) {
  std::vector<std::string> argv = {kt::kiln_binary(), "train"};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = kt::spawn_logged(argv, k.log);
  if (pid <= 0) return -1;
  int status = 0;
  if (!kt::wait_until(pid, [&] { return log_has(k.log, line); }, 120, &status)) return -2;
  for (int s : sigs) kill(pid, s);
  return kt::wait_exit_code(pid);
}

int run_kiln(const Case& k, const std::vector<std::string>& args, const std::string& log = "") {
  std::vector<std::string> argv = {kt::kiln_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = kt::spawn_logged(argv, log.empty() ? k.log : log);
  return pid <= 0 ? -1 : kt::wait_exit_code(pid);
}

void expect_same_tensors(const std::string& a, const std::string& b) {
  auto ta = load_safetensors(a).tensors, tb = load_safetensors(b).tensors;
  ASSERT_EQ(ta.size(), tb.size()) << a;
  for (auto& [name, t] : ta) EXPECT_EQ(t.to_double_vector(), tb.at(name).to_double_vector()) << a << ": " << name;
}

TrainingState state_of(const std::string& run, const json& c) {
  auto model = models::build_model(c["model"], "model");
  return load_checkpoint(resolve_checkpoint(run), *model);
}

}  // namespace

TEST(Interrupt, SigintMidEpochSavesAndTheResumedRunEndsBitExact) {
  ASSERT_TRUE(fs::exists(kt::kiln_binary())) << "build the kiln target";
  json c = config("", "x");
  Case k = make_case("sigint", c);
  json cs = config(k.runs, "straight"), ci = config(k.runs, "stopped");
  std::ofstream(k.dir + "/straight.json") << cs.dump(2);
  std::ofstream(k.cfg) << ci.dump(2);
  const std::string straight_log = k.dir + "/straight.log";  // not k.log, whose lines signal_when waits for
  ASSERT_EQ(run_kiln(k, {"train", k.dir + "/straight.json"}, straight_log), 0) << kt::file_tail(straight_log);

  const std::string run = k.runs + "/stopped";
  ASSERT_EQ(signal_when(k, {k.cfg}, "train 3/40", {SIGINT}), 130) << kt::file_tail(k.log);
  EXPECT_TRUE(log_has(k.log, "kiln: SIGINT: stopped at step")) << kt::file_tail(k.log);
  EXPECT_TRUE(log_has(k.log, "resume with: kiln train " + run)) << kt::file_tail(k.log);
  const TrainingState s = state_of(run, ci);
  EXPECT_GE(s.epoch, 2);
  EXPECT_LT(s.step, 240);
  EXPECT_EQ(s.step, s.epoch * 6 + s.epoch_step);

  ASSERT_EQ(run_kiln(k, {"train", run}), 0) << kt::file_tail(k.log);
  EXPECT_EQ(state_of(run, ci).step, 240);
  kiln::testing::expect_same_epoch_rows(k.runs + "/straight", run);
  expect_same_tensors(k.runs + "/straight/last.safetensors", run + "/last.safetensors");
  expect_same_tensors(k.runs + "/straight/last.state.safetensors", run + "/last.state.safetensors");
}

TEST(Interrupt, SigtermExits143WithACheckpoint) {
  json c = config("", "term");
  Case k = make_case("sigterm", c);
  c["train"]["runs_dir"] = k.runs;
  std::ofstream(k.cfg) << c.dump(2);
  ASSERT_EQ(signal_when(k, {k.cfg}, "train 2/40", {SIGTERM}), 143) << kt::file_tail(k.log);
  EXPECT_TRUE(log_has(k.log, "kiln: SIGTERM: stopped at step")) << kt::file_tail(k.log);
  EXPECT_GE(state_of(k.runs + "/term", c).step, 7);
}

TEST(Interrupt, Sigusr1SavesAndTrainingGoesOn) {
  json c = config("", "usr1");
  Case k = make_case("sigusr1", c);
  c["train"]["runs_dir"] = k.runs;
  c["train"]["keep_last"] = 1000;
  c["train"]["epochs"] = 20;
  std::ofstream(k.cfg) << c.dump(2);
  const pid_t pid = kt::spawn_logged({kt::kiln_binary(), "train", k.cfg}, k.log);
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_TRUE(kt::wait_until(pid, [&] { return log_has(k.log, "train 2/20"); }, 120, &status)) << kt::file_tail(k.log);
  kill(pid, SIGUSR1);
  EXPECT_EQ(kt::wait_exit_code(pid), 0) << kt::file_tail(k.log);
  EXPECT_TRUE(log_has(k.log, "saved " + k.runs + "/usr1/last at step")) << kt::file_tail(k.log);
  EXPECT_EQ(state_of(k.runs + "/usr1", c).step, 120);
}

// SIGINT then SIGTERM at once: the second to be handled (either: they are sent together) exits at
// once, 128 + its number, without the orderly stop; whatever `last` names is a whole pair.
TEST(Interrupt, ASecondSignalExitsAtOnce) {
  json c = config("", "twice");
  Case k = make_case("twice", c);
  c["train"]["runs_dir"] = k.runs;
  c["train"]["save_every_steps"] = 1;  // saves all the time: the exit may land inside one
  std::ofstream(k.cfg) << c.dump(2);
  const int rc = signal_when(k, {k.cfg}, "train 2/40", {SIGINT, SIGTERM});
  ASSERT_TRUE(rc == 130 || rc == 143) << rc << "\n" << kt::file_tail(k.log);
  const std::string second = rc == 143 ? "second SIGTERM: exiting now; " : "second SIGINT: exiting now; ";
  EXPECT_TRUE(log_has(k.log, second)) << kt::file_tail(k.log);
  // The line reaches the run's train.log too, and what it says of the checkpoint is true.
  const std::string train_log = k.runs + "/twice/train.log";
  EXPECT_TRUE(log_has(train_log, second)) << kt::file_tail(train_log);
  EXPECT_FALSE(log_has(k.log, "stopped at step")) << kt::file_tail(k.log);
  TrainingState s;
  ASSERT_NO_THROW(s = state_of(k.runs + "/twice", c));
  EXPECT_GE(s.step, 6);  // the line of step 7 comes before its save
  const std::string log = kt::file_tail(k.log, 1 << 20);
  const size_t at = log.find(second);
  ASSERT_NE(at, std::string::npos);
  const std::string said = log.substr(at + second.size(), log.find('\n', at) - at - second.size());
  long n = -1;
  if (std::sscanf(said.c_str(), "the checkpoint of step %ld is saved", &n) == 1) {
    EXPECT_EQ(s.step, n) << said;
  } else {
    ASSERT_EQ(std::sscanf(said.c_str(), "the save of step %ld is cut short", &n), 1) << said;
    EXPECT_LE(s.step, n) << said;  // the one before it (its save may have ended as the process did)
  }
  ASSERT_EQ(run_kiln(k, {"train", k.runs + "/twice", "epochs=3"}), 0) << kt::file_tail(k.log);
}

// Validation of 8192 images (seconds) after 2 training steps: a SIGINT then abandons it; the
// checkpoint is the trained epoch, not evaluated; the resumed run evaluates without training more.
TEST(Interrupt, SignalDuringValidationAbandonsItAndTheResumedRunEvaluates) {
  json c = config("", "val");
  c["data"]["synthetic"]["size"] = 8192;
  c["data"]["synthetic"]["height"] = 32;
  c["data"]["synthetic"]["width"] = 32;
  c["data"]["train_transforms"] = json::array();
  c["data"]["val_batch_size"] = 64;
  c["model"]["layers"] = json::parse(R"([
      {"type": "conv2d", "in_channels": 3, "out_channels": 16, "kernel_size": 3, "padding": 1},
      {"type": "relu"},
      {"type": "conv2d", "in_channels": 16, "out_channels": 32, "kernel_size": 3, "padding": 1},
      {"type": "batch_norm2d", "num_features": 32},
      {"type": "relu"},
      {"type": "max_pool2d", "kernel_size": 2},
      {"type": "flatten"},
      {"type": "linear", "in_features": 8192, "out_features": 4}])");
  c["train"]["epochs"] = 1;
  c["train"]["max_steps_per_epoch"] = 2;
  Case k = make_case("val", c);
  c["train"]["runs_dir"] = k.runs;
  std::ofstream(k.cfg) << c.dump(2);
  ASSERT_EQ(signal_when(k, {k.cfg}, "2/2  loss", {SIGINT}), 130) << kt::file_tail(k.log);
  EXPECT_TRUE(log_has(k.log, "val   abandoned (SIGINT)")) << kt::file_tail(k.log);
  const TrainingState s = state_of(k.runs + "/val", c);
  EXPECT_EQ(s.step, 2);
  EXPECT_EQ(s.epoch, 0);
  EXPECT_EQ(s.epoch_step, 2);
  ASSERT_EQ(run_kiln(k, {"train", k.runs + "/val"}), 0) << kt::file_tail(k.log);
  EXPECT_TRUE(log_has(k.log, "val   1/1  loss")) << kt::file_tail(k.log);
  EXPECT_TRUE(log_has(k.log, "resumed " + k.runs + "/val/last-2 at step 2: epoch 1 of 1 trained, its evaluation next"))
      << kt::file_tail(k.log);
  EXPECT_FALSE(log_has(k.log, "train 1/1 2/2  \n")) << "no empty progress line for the epoch trained before";
  EXPECT_EQ(state_of(k.runs + "/val", c).step, 2);
  // Its metrics rows are those of the run never stopped (the learning rate of the epoch's last step).
  json straight = c;
  straight["name"] = "val-straight";
  std::ofstream(k.dir + "/straight.json") << straight.dump(2);
  ASSERT_EQ(run_kiln(k, {"train", k.dir + "/straight.json"}, k.dir + "/straight.log"), 0);
  kiln::testing::expect_same_epoch_rows(k.runs + "/val-straight", k.runs + "/val");
}

// A run folder whose config.json has a key this kiln does not read (a newer kiln's), or lacks a
// section: refused, naming the key and the versions.
TEST(Interrupt, ARunOfAnotherKilnIsRefusedNamingWhy) {
  json c = config("", "other");
  Case k = make_case("other", c);
  const std::string run = k.runs + "/other";
  fs::create_directories(run);
  json future = c;
  future["kiln_version"] = "9.0.0";
  future["train"]["warp_drive"] = true;
  std::ofstream(run + "/config.json") << future.dump(2);
  EXPECT_EQ(run_kiln(k, {"train", run}), 1);
  EXPECT_TRUE(log_has(k.log, "written by kiln 9.0.0")) << kt::file_tail(k.log);
  EXPECT_TRUE(log_has(k.log, "train.warp_drive")) << kt::file_tail(k.log);
  json old = c;
  old.erase("data");
  std::ofstream(run + "/config.json") << old.dump(2);
  EXPECT_EQ(run_kiln(k, {"train", run}), 1);
  EXPECT_TRUE(log_has(k.log, "did not record its version")) << kt::file_tail(k.log);
  EXPECT_TRUE(log_has(k.log, "data.source is required")) << kt::file_tail(k.log);
}
