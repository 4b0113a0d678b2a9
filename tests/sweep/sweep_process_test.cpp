// `kiln sweep` and `kiln compare` as a user runs them, with real kiln processes (tests/kiln_process.h): a
// sweep of tiny runs interrupted by a real SIGINT while its second run trains and continued (the finished run
// kept, the stopped one resumed mid-epoch, the rest run), its table checked against the runs' own metrics.csv;
// bad variants and a changed plan refused before any run starts; a failed run recorded, the sweep completed,
// the failure kept until retry=failed.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "../kiln_process.h"
#include "core/json_reader.h"

using namespace kiln;
namespace fs = std::filesystem;
namespace kt = kiln::testing;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kiln_sweep_process_" + std::to_string(getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A tiny network on synthetic images: `size` images of 16 a batch, `epochs` epochs, a checkpoint every 5 steps.
fs::path write_config(const fs::path& dir, int size, int epochs) {
  json c = json::parse(R"({
    "name": "tiny",
    "model": {"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1},
      {"type": "relu"}, {"type": "max_pool2d", "kernel_size": 2}, {"type": "flatten"},
      {"type": "linear", "in_features": 256, "out_features": 4}]},
    "data": {"source": "synthetic", "synthetic": {"height": 16, "width": 16, "channels": 3, "num_classes": 4},
             "batch_size": 16, "workers": 0},
    "optim": {"name": "sgd", "lr": 0.05},
    "train": {"plots": false, "tensorboard": false, "save_every_steps": 5}
  })");
  c["data"]["synthetic"]["size"] = size;
  c["train"]["epochs"] = epochs;
  c["train"]["runs_dir"] = (dir / "runs").string();
  const fs::path f = dir / "tiny.json";
  std::ofstream(f) << c.dump(2);
  return f;
}

std::string text(const fs::path& f) { return kt::file_tail(f.string(), std::string::npos); }

std::vector<json> jsonl(const fs::path& f) {
  std::vector<json> rows;
  std::ifstream in(f);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) rows.push_back(json::parse(l));
  return rows;
}

// The last row's val_top1 of a run's metrics.csv, in percent; the row count in *rows.
double final_top1(const fs::path& run, size_t* rows) {
  std::ifstream in(run / "metrics.csv");
  std::string header, line, last;
  std::getline(in, header);
  *rows = 0;
  while (std::getline(in, line)) last = line, ++*rows;
  size_t col = 0;
  for (size_t p = 0; p < header.find("val_top1"); ++p) col += header[p] == ',';
  size_t start = 0;
  for (size_t c = 0; c < col; ++c) start = last.find(',', start) + 1;
  return 100 * std::stod(last.substr(start, last.find(',', start) - start));
}

class SweepProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kt::kiln_binary())) << "build the kiln target";
    setenv("OMP_NUM_THREADS", "1", 1);  // the machines have 2 cores and tests run beside each other
  }
  void TearDown() override {  // the folders stay for a look when the test failed
    if (!HasFailure()) fs::remove_all(fs::temp_directory_path() / ("kiln_sweep_process_" + std::to_string(getpid())));
  }
};

}  // namespace

TEST_F(SweepProcess, InterruptedBySigintAndContinuedThenTheTableMatchesTheRuns) {
  const fs::path d = temp_dir("signal");
  // 16384 images of 16 a batch: 1024 steps an epoch, a second or more per run on a quiet machine, so the run
  // is still going when the sweep forwards the SIGINT (it waits 0.3 s first to see whether the run got it too).
  const fs::path cfg = write_config(d, 16384, 2), sweep = d / "runs" / "sig", log = d / "sweep.log";
  const pid_t pid = kt::spawn_logged({kt::kiln_binary(), "sweep", cfg.string(), "optim.lr=0.05,0.1", "seeds=0,1", "name=sig", "parallel=1"},
                                     log.string());
  ASSERT_GT(pid, 0);
  int status = 0;
  // The second run (lr0.1-s0) has saved a checkpoint: it is mid-run (2048 steps, one save every 5).
  ASSERT_TRUE(kt::wait_until(pid, [&] { return fs::exists(sweep / "lr0.1-s0" / "last"); }, 120, &status)) << text(log);
  kill(pid, SIGINT);
  EXPECT_EQ(kt::wait_exit_code(pid), 130) << text(log);
  EXPECT_NE(text(log).find("continue the sweep with: kiln sweep " + sweep.string()), std::string::npos) << text(log);
  EXPECT_EQ(jsonl(sweep / "lr0.05-s0" / "invocations.jsonl").back()["outcome"], "finished");
  EXPECT_EQ(jsonl(sweep / "lr0.1-s0" / "invocations.jsonl").back()["outcome"], "stopped by SIGINT") << text(log);
  EXPECT_FALSE(fs::exists(sweep / "lr0.05-s1")) << "no run starts after the signal";

  const kt::KilnRun cont = kt::run_kiln_in(d, "sweep " + sweep.string());
  EXPECT_EQ(cont.exit_code, 0) << cont.out << cont.err;
  EXPECT_NE(cont.out.find("run 2 of 4: lr0.1-s0 resumed"), std::string::npos) << cont.out;
  EXPECT_EQ(cont.out.find("lr0.05-s0 started"), std::string::npos) << "a finished run is kept: " << cont.out;
  EXPECT_NE(cont.out.find("run 4 of 4: lr0.1-s1 finished"), std::string::npos) << cont.out;
  EXPECT_NE(cont.out.find("done: 4 of 4 runs finished"), std::string::npos) << cont.out;
  EXPECT_EQ(jsonl(sweep / "lr0.05-s0" / "invocations.jsonl").size(), 2u) << "trained once";
  const std::vector<json> resumed = jsonl(sweep / "lr0.1-s0" / "invocations.jsonl");
  ASSERT_EQ(resumed.size(), 4u);
  EXPECT_GT(resumed[2]["epoch_step"].get<int64_t>() + resumed[2]["epoch"].get<int64_t>() * 1024, 0) << resumed[2].dump();
  EXPECT_TRUE(resumed[2]["resumed"].is_string()) << "resumed from its checkpoint: " << resumed[2].dump();
  EXPECT_EQ(resumed[3]["outcome"], "finished");

  // The table against each run's own metrics.csv: mean and sample std (n - 1) of the final top-1.
  const json summary = json::parse(text(sweep / "summary.json"));
  for (const json& v : summary["variants"]) {
    const std::string label = v["label"];
    std::vector<double> x;
    for (const char* seed : {"0", "1"}) {
      size_t rows = 0;
      x.push_back(final_top1(sweep / (label + "-s" + seed), &rows));
      EXPECT_EQ(rows, 2u) << label << " s" << seed << ": one row per epoch, none twice after the resume";
    }
    const double mean = (x[0] + x[1]) / 2, sd = std::sqrt((x[0] - mean) * (x[0] - mean) + (x[1] - mean) * (x[1] - mean));
    EXPECT_EQ(v["seeds_finished"], 2) << label;
    EXPECT_NEAR(v["final_top1"]["mean"].get<double>(), mean, 1e-4) << label;
    EXPECT_NEAR(v["final_top1"]["std"].get<double>(), sd, 1e-4) << label;
    EXPECT_EQ(v["parameters"], 1140) << "3*4*9+4 + 256*4+4";
  }
  for (const char* f : {"summary.md", "summary.csv", "top1.png", "curves.png", "sweep.json"})
    EXPECT_TRUE(fs::exists(sweep / f)) << f;

  const kt::KilnRun show = kt::run_kiln_in(d, "sweep show " + sweep.string());
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("| lr0.05"), std::string::npos) << show.out;
  const kt::KilnRun cmp = kt::run_kiln_in(d, "compare " + (sweep / "lr0.05-s0").string() + " " +
                                                 (sweep / "lr0.1-s1").string() + " out=" + (d / "cmp.png").string());
  EXPECT_EQ(cmp.exit_code, 0) << cmp.err;
  EXPECT_NE(cmp.out.find("| optim.lr | 0.05 | 0.1 |"), std::string::npos) << cmp.out;
  EXPECT_NE(cmp.out.find("| train.seed | 0 | 1 |"), std::string::npos) << cmp.out;
  EXPECT_TRUE(fs::exists(d / "cmp.png"));
  // An ordinary run folder: kiln eval works on it unchanged.
  const kt::KilnRun eval = kt::run_kiln_in(d, "eval " + (sweep / "lr0.1-s0").string());
  EXPECT_EQ(eval.exit_code, 0) << eval.err;
}

TEST_F(SweepProcess, BadVariantsAndAChangedPlanAreRefusedBeforeAnyRunStarts) {
  const fs::path d = temp_dir("bad");
  const fs::path cfg = write_config(d, 64, 1);
  kt::KilnRun r = kt::run_kiln_in(d, "sweep " + cfg.string() + " train.epochs=1,0 name=bad");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("kiln sweep bad: variant 'epochs0' (train.epochs=0): train.epochs = 0 is out of range"),
            std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "runs" / "bad")) << "nothing written before every variant is accepted";
  std::ofstream(d / "typo.json") << R"({"base": "tiny.json", "variants": [{"label": "ok", "set": {"optim.lr": 0.1}},
      {"label": "typo", "set": {"optim.lrr": 0.1}}]})";
  r = kt::run_kiln_in(d, "sweep typo.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("variant 'typo' (optim.lrr=0.1): "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("optim.lrr"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "runs" / "typo"));
  std::ofstream(d / "empty.json") << R"({"base": "tiny.json", "grid": {}})";
  r = kt::run_kiln_in(d, "sweep empty.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("grid is empty"), std::string::npos) << r.err;
  r = kt::run_kiln_in(d, "sweep typo.json retry=all");  // refused for a sweep file as for a sweep folder
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("retry=all is not accepted; accepted: retry=failed"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "runs" / "typo"));

  // A sweep, then the same name with another base: refused naming the change; adding a seed continues it.
  r = kt::run_kiln_in(d, "sweep " + cfg.string() + " name=p");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = kt::run_kiln_in(d, "sweep " + cfg.string() + " name=p lr=0.3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("holds another plan; what changed: base config: optim.lr: 0.05 -> 0.3"), std::string::npos) << r.err;
  r = kt::run_kiln_in(d, "sweep " + cfg.string() + " name=p seeds=0,1");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("adds variants or seeds"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 runs: 1 finished"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run 2 of 2: base-s1 finished"), std::string::npos) << r.out;
}

TEST_F(SweepProcess, AFailedRunIsRecordedTheSweepCompletesAndRetryIsExplicit) {
  const fs::path d = temp_dir("failed");
  write_config(d, 64, 1);
  std::ofstream(d / "f.json") << R"({"name": "f", "base": "tiny.json", "variants": [
      {"label": "broken", "set": {"train.init": "/nonexistent/weights.safetensors"}},
      {"label": "ok", "set": {"optim.lr": 0.1}}]})";
  const fs::path sweep = d / "runs" / "f";
  kt::KilnRun r = kt::run_kiln_in(d, "sweep f.json");
  EXPECT_EQ(r.exit_code, 1) << "some run failed";
  EXPECT_NE(r.out.find("run 1 of 2: broken-s0 FAILED (exit 1)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run 2 of 2: ok-s0 finished"), std::string::npos) << "the sweep goes on: " << r.out;
  const json failed = json::parse(text(sweep / "failed.json"));
  EXPECT_NE(failed["broken-s0"]["error"].get<std::string>().find("does not exist"), std::string::npos) << failed.dump();
  EXPECT_NE(text(sweep / "summary.md").find("| broken-s0 | broken | 0 | failed: "), std::string::npos);
  const json summary = json::parse(text(sweep / "summary.json"));
  EXPECT_EQ(summary["variants"][0]["seeds_finished"], 0);
  EXPECT_EQ(summary["variants"][1]["seeds_finished"], 1);

  r = kt::run_kiln_in(d, "sweep " + sweep.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("2 runs: 1 finished, 1 failed (kept"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("broken-s0 started"), std::string::npos) << "not retried unless asked: " << r.out;
  r = kt::run_kiln_in(d, "sweep " + sweep.string() + " retry=failed");
  EXPECT_NE(r.out.find("broken-s0 started"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("broken-s0 FAILED"), std::string::npos) << r.out;
  r = kt::run_kiln_in(d, "sweep " + sweep.string() + " retry=all");
  EXPECT_NE(r.err.find("retry=all is not accepted; accepted: retry=failed"), std::string::npos) << r.err;
}

// A scheduler's SIGTERM (SLURM's scancel) reaches every process of the job, the run's as well as the
// sweep's: the sweep does not forward a second one, which would stop the run unsaved.
TEST_F(SweepProcess, ASigtermToTheRunAndTheSweepAtOnceStillSavesTheRun) {
  const fs::path d = temp_dir("scancel");
  const fs::path cfg = write_config(d, 1024, 3), sweep = d / "runs" / "job", log = d / "sweep.log";
  // Steps of about a second (64x64 images, 64 channels, 128 a batch): the run is still in its step when the
  // sweep would forward the signal, so a forwarded second SIGTERM would stop it unsaved.
  json c = json::parse(text(cfg));
  c["data"]["synthetic"]["height"] = c["data"]["synthetic"]["width"] = 64;
  c["data"]["batch_size"] = 128;
  c["model"]["layers"][0]["out_channels"] = 64;
  c["model"]["layers"][4]["in_features"] = 64 * 32 * 32;
  c["train"]["save_every_steps"] = 1;
  std::ofstream(cfg) << c.dump(2);
  const pid_t pid = kt::spawn_logged({kt::kiln_binary(), "sweep", cfg.string(), "name=job"}, log.string());
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_TRUE(kt::wait_until(pid, [&] { return fs::exists(sweep / "base-s0" / "last"); }, 120, &status)) << text(log);
  const pid_t run = jsonl(sweep / "base-s0" / "invocations.jsonl")[0]["pid"].get<pid_t>();
  kill(run, SIGTERM);
  kill(pid, SIGTERM);
  EXPECT_EQ(kt::wait_exit_code(pid), 143) << text(log);
  EXPECT_EQ(jsonl(sweep / "base-s0" / "invocations.jsonl").back()["outcome"], "stopped by SIGTERM")
      << text(sweep / "logs" / "base-s0.log");
  EXPECT_EQ(text(sweep / "logs" / "base-s0.log").find("second SIGTERM"), std::string::npos);
  EXPECT_NE(text(log).find("continue the sweep with: kiln sweep " + sweep.string()), std::string::npos) << text(log);
}
