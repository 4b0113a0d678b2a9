// A run folder that tells the truth (tools/engine/run_history.h, docs/training.md "What a run folder
// records"): the keys changed on resume are found, printed and recorded in invocations.jsonl; the
// changes a mid-epoch checkpoint cannot honour are refused naming them, and so are model changes that
// break the checkpoint's shapes; train.stop_after shapes one invocation and is not persisted, so a
// resume continues the run; train.log starts each invocation with a header line.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "../expect_error.h"
#include "../resume_util.h"
#include "tools/deploy/config.h"
#include "tools/engine/interrupt.h"
#include "tools/engine/run_history.h"
#include "tools/engine/trainer.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// 192 samples in batches of 32: 6 steps an epoch, 3 epochs, a second or two.
json config(const std::string& runs, const std::string& name) {
  json c = json::parse(R"({
    "model": {"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1},
      {"type": "relu"},
      {"type": "max_pool2d", "kernel_size": 2},
      {"type": "flatten"},
      {"type": "linear", "in_features": 128, "out_features": 4}]},
    "data": {"source": "synthetic", "synthetic": {"size": 192, "height": 8, "width": 8, "channels": 3, "num_classes": 4},
             "train_transforms": [{"type": "horizontal_flip"}], "batch_size": 32, "workers": 0},
    "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
    "schedule": {"name": "cosine"},
    "train": {"epochs": 3, "seed": 3, "plots": false, "tensorboard": false}
  })");
  c["name"] = name;
  c["train"]["runs_dir"] = runs;
  return c;
}

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_history_" + name;
  fs::remove_all(d);
  return d;
}

std::vector<json> jsonl(const std::string& file) {
  std::ifstream in(file);
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

std::string read_all(const std::string& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The run's config.json with the overrides, as `kiln train RUN key=value ...` resumes it.
json resume_config(const std::string& run, const std::vector<std::string>& overrides) {
  json c = load_config_file(run + "/config.json");
  std::vector<std::string> o = overrides;
  o.push_back("resume=" + run);
  apply_overrides(c, o);
  return c;
}

}  // namespace

TEST(RunHistory, ChangedKeysAreFoundByDottedPathWithoutTheInvocationsOwn) {
  const json a = json::parse(R"({"optim": {"lr": 0.1, "betas": [0.9, 0.99]}, "train": {"epochs": 3, "stop_after": 1,
      "resume": ""}, "data": {"train_transforms": [{"type": "crop", "p": 0.5}]}, "kiln_version": "0.1.0"})");
  const json b = json::parse(R"({"optim": {"lr": 0.02, "betas": [0.9, 0.999]}, "train": {"epochs": 3, "stop_after": 0,
      "resume": "runs/x", "ema": true}, "data": {"train_transforms": [{"type": "crop", "p": 0.3}]}, "kiln_version": "0.2.0"})");
  const auto c = changed_keys(a, b);
  ASSERT_EQ(c.size(), 4u) << describe_changes(c);
  EXPECT_EQ(c.at("optim.lr"), std::make_pair(json(0.1), json(0.02)));
  EXPECT_EQ(c.at("optim.betas").second, json::parse("[0.9, 0.999]"));
  EXPECT_EQ(c.at("data.train_transforms.0.p"), std::make_pair(json(0.5), json(0.3)));
  EXPECT_EQ(c.at("train.ema"), std::make_pair(json(), json(true)));
  EXPECT_HAS(describe_changes(c), "optim.lr: 0.1 -> 0.02");
  EXPECT_TRUE(changed_keys(a, a).empty());
}

TEST(RunHistory, MidEpochRefusalNamesTheKeysThatShapeTheEpochOnly) {
  const auto c = changed_keys(json::parse(R"({"data": {"seed": 1, "workers": 2}, "optim": {"lr": 0.1}})"),
                              json::parse(R"({"data": {"seed": 2, "workers": 0}, "optim": {"lr": 0.2}})"));
  const std::string r = resume_refusal(c, /*mid_epoch=*/true, "runs/x/last-4");
  EXPECT_HAS(r, "data.seed (1 -> 2)");
  EXPECT_EQ(r.find("data.workers"), std::string::npos) << r;
  EXPECT_EQ(r.find("optim.lr"), std::string::npos) << r;
  EXPECT_EQ(resume_refusal(c, /*mid_epoch=*/false, "runs/x/last-6"), "");
}

// stop_after shapes one invocation: not in config.json; `kiln train RUN` then continues the run to
// train.epochs, and ends with the bits and the rows of the run never stopped. The changed key of the
// second invocation is recorded with its old and new value; train.log has a header per invocation.
TEST(RunHistory, StopAfterIsNotPersistedAndAResumeWithAChangedKeyIsRecorded) {
  const std::string runs = fresh_dir("stop_after");
  json first = config(runs, "split");
  apply_overrides(first, {"train.stop_after=1"});
  const TrainResult a = train(first, true);
  EXPECT_EQ(a.steps, 6);
  EXPECT_EQ(load_config_file(a.run_dir + "/config.json")["train"]["stop_after"], 0);

  const TrainResult b = train(resume_config(a.run_dir, {"optim.lr=0.05"}), true);
  EXPECT_EQ(b.steps, 18) << "the resume trains to train.epochs";
  EXPECT_EQ(load_config_file(a.run_dir + "/config.json")["optim"]["lr"], 0.05);
  const std::vector<json> rows = jsonl(a.run_dir + "/invocations.jsonl");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["event"], "start");
  EXPECT_EQ(rows[0]["changed"], json::object());
  EXPECT_EQ(rows[1]["event"], "end");
  EXPECT_EQ(rows[1]["outcome"], "stopped by train.stop_after");
  EXPECT_EQ(rows[2]["event"], "start");
  EXPECT_EQ(rows[2]["step"], 6);
  EXPECT_EQ(rows[2]["changed"], json::parse(R"({"optim.lr": [0.1, 0.05]})"));
  EXPECT_EQ(rows[3]["outcome"], "finished");
  EXPECT_GT(rows[2]["time"].get<double>(), rows[0]["time"].get<double>());
  EXPECT_EQ(kiln::testing::epoch_rows(a.run_dir).size(), 3u);
}

TEST(RunHistory, StopAfterWithNothingLeftToTrainIsRefused) {
  const std::string runs = fresh_dir("nothing");
  json first = config(runs, "n");
  apply_overrides(first, {"train.stop_after=2"});
  const TrainResult a = train(first, true);
  kiln::testing::expect_error([&] { train(resume_config(a.run_dir, {"train.stop_after=2"}), true); },
                              {"train.stop_after = 2", "has trained 2 epoch(s) already", "would train nothing"});
}

// A mid-epoch checkpoint: data.seed or train.seed changed there would change the rest of the epoch's
// images: refused naming the key; a key that only tunes speed (data.workers) is taken.
TEST(RunHistory, AMidEpochResumeRefusesKeysThatChangeTheEpochsImages) {
  const std::string runs = fresh_dir("mid");
  request_signal(SIGINT);  // stops after step 1, saved mid-epoch
  const TrainResult stopped = train(config(runs, "mid"), true);
  request_signal(0);
  ASSERT_EQ(stopped.interrupted, SIGINT);
  kiln::testing::expect_error([&] { train(resume_config(stopped.run_dir, {"data.seed=5"}), true); },
                              {"data.seed (0 -> 5)", "mid-epoch", "train.stop_after"});
  kiln::testing::expect_error([&] { train(resume_config(stopped.run_dir, {"train.seed=4"}), true); },
                              {"train.seed (3 -> 4)"});
  const TrainResult r = train(resume_config(stopped.run_dir, {"data.workers=2"}), true);
  EXPECT_EQ(r.steps, 18);
  const std::vector<json> rows = jsonl(stopped.run_dir + "/invocations.jsonl");
  ASSERT_GE(rows.size(), 3u);
  EXPECT_EQ(rows[1]["outcome"], "stopped by SIGINT");
  EXPECT_EQ(rows[2]["changed"], json::parse(R"({"data.workers": [0, 2]})"));
  EXPECT_EQ(rows[2]["epoch_step"], 1);
}

// A model change that breaks the checkpoint's shapes: the error names the changed key.
TEST(RunHistory, AModelChangeOnResumeIsNamedInTheShapeError) {
  const std::string runs = fresh_dir("shapes");
  json first = config(runs, "s");
  apply_overrides(first, {"train.stop_after=1"});
  const TrainResult a = train(first, true);
  kiln::testing::expect_error(
      [&] {
        train(resume_config(a.run_dir, {"model.layers.0.out_channels=16", "model.layers.4.in_features=256"}), true);
      },
      {"model.layers.0.out_channels (8 -> 16)", "train.init="});
}

// train.log: a header line per invocation (time, kiln, the command line), then what it printed,
// the changed keys of a resume with their old and new values included.
TEST(RunHistory, TrainLogHasAHeaderPerInvocation) {
  const std::string runs = fresh_dir("log");
  json first = config(runs, "log");
  apply_overrides(first, {"train.stop_after=1"});
  const TrainResult a = train(first, false);
  train(resume_config(a.run_dir, {"optim.lr=0.05"}), false);
  const std::string log = read_all(a.run_dir + "/train.log");
  size_t headers = 0;
  for (size_t p = 0; (p = log.find("==== ", p)) != std::string::npos; ++p) ++headers;
  EXPECT_EQ(headers, 2u) << log;
  EXPECT_EQ(log.rfind("==== ", 0), 0u) << "the header comes first: " << log.substr(0, 200);
  EXPECT_HAS(log, "kiln 0.");
  EXPECT_HAS(log, "resumed " + a.run_dir + "/last-6 at step 6: after epoch 1 of 3");
  EXPECT_HAS(log, "resume: 1 key(s) changed from the run's config as run");
  EXPECT_HAS(log, "  optim.lr: 0.1 -> 0.05\n");
}
