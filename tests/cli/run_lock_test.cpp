// A run folder has one writer (tools/engine/run_lock.h), with real `kiln train` processes: while one
// trains runs/dup, a second `kiln train runs/dup` is refused naming the holder (host, PID, since when)
// and changes nothing in the folder; a new run of the same name goes to runs/dup-2; after kill -9 of
// the holder (the kernel drops its lock: nothing to clean up) a third process resumes the run.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../kiln_process.h"
#include "core/json_reader.h"

using namespace kiln;
namespace fs = std::filesystem;
namespace kt = kiln::testing;

namespace {

// 6 steps an epoch, 200 epochs, saving every 3 steps: it trains until killed.
json long_config(const std::string& runs) {
  json c = json::parse(R"({
    "name": "dup",
    "model": {"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1},
      {"type": "relu"},
      {"type": "max_pool2d", "kernel_size": 2},
      {"type": "flatten"},
      {"type": "linear", "in_features": 512, "out_features": 4}]},
    "data": {"source": "synthetic", "synthetic": {"size": 192, "height": 16, "width": 16, "channels": 3, "num_classes": 4},
             "batch_size": 32, "workers": 0},
    "optim": {"name": "sgd", "lr": 0.05},
    "train": {"epochs": 200, "seed": 1, "plots": false, "log_every": 1, "eval_every": 1000, "tensorboard": false,
              "save_every_steps": 3}
  })");
  c["train"]["runs_dir"] = runs;
  return c;
}

bool has(const std::string& file, const std::string& what) {
  return kt::file_tail(file, 1 << 20).find(what) != std::string::npos;
}

int run_kiln(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {kt::kiln_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = kt::spawn_logged(argv, log);
  return pid <= 0 ? -1 : kt::wait_exit_code(pid);
}

size_t lines_of(const std::string& file) {
  std::ifstream in(file);
  size_t n = 0;
  for (std::string l; std::getline(in, l);) ++n;
  return n;
}

}  // namespace

TEST(RunLock, ASecondWriterIsRefusedNamingTheHolderAndKillNineLeavesNothingToClean) {
  ASSERT_TRUE(fs::exists(kt::kiln_binary())) << "build the kiln target";
  const std::string dir = ::testing::TempDir() + "kiln_run_lock";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cfg = dir + "/config.json", log1 = dir + "/first.log", log2 = dir + "/second.log",
                    log3 = dir + "/third.log", run = dir + "/runs/dup";
  std::ofstream(cfg) << long_config(dir + "/runs").dump(2);

  const pid_t holder = kt::spawn_logged({kt::kiln_binary(), "train", cfg}, log1);
  ASSERT_GT(holder, 0);
  int status = 0;
  // Before its first checkpoint: refused as a second writer (not as a folder without a checkpoint).
  ASSERT_TRUE(kt::wait_until(holder, [&] { return has(log1, "/6  loss"); }, 120, &status))
      << kt::file_tail(log1);
  if (!fs::exists(run + "/last")) {
    EXPECT_EQ(run_kiln({"train", run}, log2), 1) << kt::file_tail(log2);
    EXPECT_TRUE(has(log2, "is being written by another kiln train (host ")) << kt::file_tail(log2);
  }
  ASSERT_TRUE(kt::wait_until(holder, [&] { return has(log1, "saved " + run + "/last at step 6"); }, 120, &status))
      << kt::file_tail(log1);

  // The second writer: refused at once, naming the holder; the run folder's logs are untouched by it.
  const size_t invocations = lines_of(run + "/invocations.jsonl");
  EXPECT_EQ(run_kiln({"train", run}, log2), 1) << kt::file_tail(log2);
  EXPECT_TRUE(has(log2, "is being written by another kiln train (host ")) << kt::file_tail(log2);
  EXPECT_TRUE(has(log2, "PID " + std::to_string(holder) + ", since ")) << kt::file_tail(log2);
  EXPECT_FALSE(has(log2, "resumed ")) << kt::file_tail(log2);
  EXPECT_EQ(lines_of(run + "/invocations.jsonl"), invocations);
  EXPECT_FALSE(has(run + "/train.log", "being written by another")) << "the refused process wrote the holder's log";
  // resume= names the same folder: refused the same way.
  EXPECT_EQ(run_kiln({"train", "resume=" + run}, log2), 1) << kt::file_tail(log2);
  // A new run of the same name is another folder, not a second writer.
  EXPECT_TRUE(kill(holder, 0) == 0) << "the holder should still be training";

  // kill -9: the kernel releases the lock; a third process resumes the run where its last save was.
  kill(holder, SIGKILL);
  waitpid(holder, &status, 0);
  const std::string pair = fs::read_symlink(run + "/last").string();  // last-<step>
  const long step = std::stol(pair.substr(5));
  const std::string stop_after = "train.stop_after=" + std::to_string(step / 6 + 1);  // to the epoch's end
  EXPECT_EQ(run_kiln({"train", run, stop_after}, log3), 0) << kt::file_tail(log3);
  EXPECT_TRUE(has(log3, "resumed " + run + "/last-")) << kt::file_tail(log3);
  const std::string train_log = kt::file_tail(run + "/train.log", 1 << 22);
  size_t headers = 0;
  for (size_t p = 0; (p = train_log.find("\n==== ", p)) != std::string::npos; ++p) ++headers;
  EXPECT_EQ(headers, 1u) << "the holder's and the third invocation's headers, nothing of the refused ones";
  std::ifstream lock(run + "/.lock");
  std::string holder_line;
  std::getline(lock, holder_line);
  EXPECT_NE(holder_line.find("PID "), std::string::npos) << holder_line;
  EXPECT_EQ(holder_line.find("PID " + std::to_string(holder) + ","), std::string::npos)
      << "the lock file names the last holder, not the killed one: " << holder_line;
}

// Two new runs of one name at once: each gets its own folder (runs/two, runs/two-2), both finish.
TEST(RunLock, TwoNewRunsOfOneNameGetTwoFolders) {
  const std::string dir = ::testing::TempDir() + "kiln_run_lock_new";
  fs::remove_all(dir);
  fs::create_directories(dir);
  json c = long_config(dir + "/runs");
  c["name"] = "two";
  c["train"]["epochs"] = 2;
  const std::string cfg = dir + "/config.json";
  std::ofstream(cfg) << c.dump(2);
  const pid_t a = kt::spawn_logged({kt::kiln_binary(), "train", cfg}, dir + "/a.log");
  const pid_t b = kt::spawn_logged({kt::kiln_binary(), "train", cfg}, dir + "/b.log");
  EXPECT_EQ(kt::wait_exit_code(a), 0) << kt::file_tail(dir + "/a.log");
  EXPECT_EQ(kt::wait_exit_code(b), 0) << kt::file_tail(dir + "/b.log");
  EXPECT_TRUE(fs::exists(dir + "/runs/two/last.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/runs/two-2/last.safetensors"));
  EXPECT_EQ(lines_of(dir + "/runs/two/invocations.jsonl"), 2u);
  EXPECT_EQ(lines_of(dir + "/runs/two-2/invocations.jsonl"), 2u);
}
