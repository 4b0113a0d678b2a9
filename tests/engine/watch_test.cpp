// Watching a run (docs/training.md, "Watching a run"): metrics.jsonl's step and epoch rows and their
// truncation on resume, TensorBoard event files read back (framing, both CRCs, scalars and steps;
// a damaged file detected), the plots' axes, the progress line's times and train.log's content.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "../expect_error.h"
#include "tools/deploy/config.h"
#include "tools/engine/console_log.h"
#include "tools/engine/metrics.h"
#include "tools/engine/progress.h"
#include "tools/engine/tensorboard.h"
#include "tools/engine/trainer.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// 192 images, batch 32: 6 steps an epoch; a step row every 2 steps.
json tiny_config(const std::string& runs) {
  json c = json::parse(R"({
    "name": "watch",
    "model": {"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1},
      {"type": "relu"},
      {"type": "max_pool2d", "kernel_size": 2},
      {"type": "flatten"},
      {"type": "linear", "in_features": 128, "out_features": 4}]},
    "data": {"source": "synthetic", "synthetic": {"size": 192, "height": 8, "width": 8, "channels": 3, "num_classes": 4},
             "batch_size": 32, "workers": 1},
    "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
    "schedule": {"name": "cosine"},
    "train": {"epochs": 2, "seed": 3, "log_every": 2}
  })");
  c["train"]["runs_dir"] = runs;
  return c;
}

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_watch_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::vector<nlohmann::json> jsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::vector<int64_t> steps_of(const std::vector<nlohmann::json>& rows, const std::string& kind) {
  std::vector<int64_t> s;
  for (const auto& r : rows)
    if (r["kind"] == kind) s.push_back(r["step"].get<int64_t>());
  return s;
}

// tag -> (step -> value) over a run folder's event files, as TensorBoard shows them: a SessionLog
// START at step s drops the points at s or later that came before it.
std::map<std::string, std::map<int64_t, float>> scalars_of_run(const std::string& dir, int* starts = nullptr) {
  std::map<std::string, std::map<int64_t, float>> out;
  for (const std::string& f : event_files(dir))
    for (const EventRecord& e : read_event_file(f)) {
      if (e.session_status == 1) {
        if (starts) ++*starts;
        for (auto& [tag, pts] : out) pts.erase(pts.lower_bound(e.step), pts.end());
      }
      for (const auto& [tag, v] : e.scalars) out[tag][e.step] = v;
    }
  return out;
}

}  // namespace

TEST(Watch, Crc32cOfTheStandardCheckString) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // CRC-32C's published check value
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Watch, EventFileRoundTripAndDamageDetected) {
  const std::string dir = fresh_dir("events");
  std::string path;
  {
    EventWriter w(dir);
    path = w.path();
    EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
    w.scalars(10, {{"train/loss", 1.5}, {"train/acc", 0.25}, {"train/loss_scale", NAN}});
    w.session_start(11);
    w.scalars(20, {{"val/top1", 0.75}});
  }
  std::vector<EventRecord> ev = read_event_file(path);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_GT(ev[0].wall_time, 1.6e9);
  EXPECT_EQ(ev[1].step, 10);
  ASSERT_EQ(ev[1].scalars.size(), 2u) << "a NaN is not written";
  EXPECT_EQ(ev[1].scalars[0], (std::pair<std::string, float>{"train/loss", 1.5f}));
  EXPECT_EQ(ev[1].scalars[1], (std::pair<std::string, float>{"train/acc", 0.25f}));
  EXPECT_EQ(ev[2].session_status, 1);
  EXPECT_EQ(ev[2].step, 11);
  EXPECT_EQ(ev[3].scalars[0].first, "val/top1");

  std::string bytes = read_text(path);
  const size_t first = 12 + ev.size();  // a byte inside the first record's data
  auto damaged = [&](size_t at, const std::string& name) {
    std::string b = bytes;
    b[at] = static_cast<char>(b[at] ^ 0x5a);
    const std::string p = dir + "/" + name;
    std::ofstream(p, std::ios::binary) << b;
    return kiln::testing::error_of([&] { read_event_file(p); });
  };
  EXPECT_NE(damaged(first, "data").find("the data's CRC does not match"), std::string::npos);
  EXPECT_NE(damaged(3, "length").find("the length's CRC does not match"), std::string::npos);
  const std::string cut = dir + "/cut";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 3);
  EXPECT_NE(kiln::testing::error_of([&] { read_event_file(cut); }).find("record 4"), std::string::npos);
}

TEST(Watch, PlotAxesStartAtSensibleBounds) {
  PlotAxis a = plot_axis({5.0, 2.0, 0.01, NAN}, PlotKind::loss);  // more than a decade: log scale
  EXPECT_TRUE(a.log);
  EXPECT_DOUBLE_EQ(a.lo, 0.01);
  EXPECT_DOUBLE_EQ(a.hi, 10);
  a = plot_axis({1.9, 0.6, 1.2}, PlotKind::loss);  // within a decade: linear from zero, round ticks
  EXPECT_FALSE(a.log);
  EXPECT_EQ(a.lo, 0);
  EXPECT_DOUBLE_EQ(a.step, 0.5);
  EXPECT_DOUBLE_EQ(a.hi, 2.0);
  a = plot_axis({0.96, 0.28}, PlotKind::loss);
  EXPECT_DOUBLE_EQ(a.step, 0.2);
  EXPECT_DOUBLE_EQ(a.hi, 1.0);
  EXPECT_DOUBLE_EQ(nice_step(0.0013), 0.002);
  EXPECT_DOUBLE_EQ(nice_step(70), 100);
  EXPECT_DOUBLE_EQ(nice_step(2), 2);
  a = plot_axis({-131, 2.0}, PlotKind::loss);  // never below zero
  EXPECT_GE(a.lo, 0);
  a = plot_axis({12, 98.5}, PlotKind::percent);
  EXPECT_EQ(a.lo, 0);
  EXPECT_EQ(a.hi, 100);
  a = plot_axis({0.1, 0.0, 1e-4}, PlotKind::nonnegative);  // lr: linear from zero, even across decades
  EXPECT_FALSE(a.log);
  EXPECT_EQ(a.lo, 0);
  EXPECT_GT(a.hi, 0.1);
  a = plot_axis({}, PlotKind::loss);
  EXPECT_EQ(a.lo, 0);
  EXPECT_GT(a.hi, 0);
}

TEST(Watch, ProgressTimes) {
  EXPECT_EQ(format_duration(42.2), "42s");
  EXPECT_EQ(format_duration(185), "3:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(2 * 86400 + 3 * 3600 + 4 * 60 + 5), "2d 03:04:05");
  EXPECT_EQ(format_duration(NAN), "?");
  EXPECT_DOUBLE_EQ(eta_seconds(10, 2, 10), 40);
  EXPECT_TRUE(std::isnan(eta_seconds(0, 0, 10)));
  // 30 s for 3 of 10 steps; the run: 100 s for 13 of 40 steps
  EXPECT_EQ(time_fields(30, 3, 10, 100, 13, 40), "30s eta 1:10, run eta 3:28");
  EXPECT_EQ(time_fields(95, 10, 10, 100, 20, 40), "epoch 1:35, run eta 1:40");
  EXPECT_EQ(time_fields(95, 10, 10, 190, 40, 40), "epoch 1:35") << "the last epoch: nothing after it";
}

TEST(Watch, TerminalRedrawsBecomeFinalLines) {
  LineFolder f;
  std::string out = f.feed("start\n\r\033[Ktrain 1/2 [#---] 1/4\r\033[Ktrain 1/2 [##--] 2");
  EXPECT_EQ(out, "start\n");
  out += f.feed("/4\r\033[Ktrain 1/2 4/4 done\nwin\r\n\033[1;31mred\033[0m\npartial");
  EXPECT_EQ(out, "start\ntrain 1/2 4/4 done\nwin\nred\n");
  EXPECT_EQ(f.finish(), "partial\n");
}

TEST(Watch, ConsoleCaptureKeepsWhatCameBeforeTheLog) {
  const std::string dir = fresh_dir("capture");
  {
    ConsoleCapture c;
    ASSERT_TRUE(c.active());
    ConsoleCapture inner;  // one at a time
    EXPECT_FALSE(inner.active());
    std::printf("before the folder\n");
    std::cerr << "a warning\n";
    attach_console_log(dir + "/train.log");
    std::cout << "\rbar 1\rbar 2\rafter\n";
    std::fprintf(stderr, "unfinished");
    c.note("kiln: error: the end");
  }
  std::cout << "not captured\n" << std::flush;
  // stdout and stderr are two pipes: each stream's lines keep their order, the two interleave as they were read.
  const std::string log = read_text(dir + "/train.log");
  for (const char* line : {"before the folder\n", "a warning\n", "after\n", "unfinished\n"})
    EXPECT_NE(log.find(line), std::string::npos) << line << " in " << log;
  EXPECT_LT(log.find("before the folder"), log.find("after"));
  EXPECT_EQ(log.find("bar"), std::string::npos) << log;
  EXPECT_EQ(log.substr(log.size() - 21), "kiln: error: the end\n") << "the note is the last line";
}

// A run's logs: step rows every log interval, epoch rows, the event files, the plots, train.log.
TEST(Watch, RunWritesStepRowsEventsPlotsAndConsole) {
  const std::string runs = fresh_dir("run");
  const TrainResult r = train(tiny_config(runs), /*quiet=*/false);
  const std::vector<nlohmann::json> rows = jsonl(r.run_dir + "/metrics.jsonl");
  EXPECT_EQ(steps_of(rows, "step"), (std::vector<int64_t>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(steps_of(rows, "epoch"), (std::vector<int64_t>{6, 12}));
  for (const auto& row : rows) {
    if (row["kind"] != "step") {
      EXPECT_TRUE(row["val_top1"].is_number()) << row.dump();
      continue;
    }
    for (const char* k : {"loss", "acc", "lr", "images_per_s", "data_wait_share", "time", "epoch"})
      ASSERT_TRUE(row.contains(k) && row[k].is_number()) << k << " in " << row.dump();
    EXPECT_FALSE(row.contains("loss_scale")) << "fp32 has no loss scale";
    EXPECT_GT(row["loss"].get<double>(), 0);
    EXPECT_GE(row["acc"].get<double>(), 0);
    EXPECT_LE(row["acc"].get<double>(), 1);
    EXPECT_GT(row["images_per_s"].get<double>(), 0);
    EXPECT_EQ(row["epoch"].get<int64_t>(), (row["step"].get<int64_t>() - 1) / 6 + 1);
  }
  // The event files carry the same points.
  const auto sc = scalars_of_run(r.run_dir);
  for (const char* tag : {"train/loss", "train/acc", "train/lr", "train/images_per_s", "train/data_wait_share"}) {
    ASSERT_TRUE(sc.count(tag)) << tag;
    EXPECT_EQ(sc.at(tag).size(), 6u) << tag;
  }
  EXPECT_EQ(sc.count("train/loss_scale"), 0u);
  ASSERT_TRUE(sc.count("val/top1"));
  EXPECT_EQ(sc.at("val/top1").size(), 2u);
  EXPECT_NEAR(sc.at("val/top1").at(12), r.val_top1, 1e-6);
  EXPECT_NEAR(sc.at("train/loss").at(4), rows[1]["loss"].get<double>(), 1e-5);
  for (const char* f : {"loss.png", "accuracy.png", "lr.png"}) EXPECT_TRUE(fs::is_regular_file(r.run_dir + "/" + f)) << f;
  // The console: the run's first line, the progress lines and the evaluation, no redraws.
  const std::string log = read_text(r.run_dir + "/train.log");
  EXPECT_NE(log.find("kiln: watch on cpu"), std::string::npos) << log;
  EXPECT_NE(log.find("train 2/2"), std::string::npos) << log;
  EXPECT_NE(log.find("val   2/2  loss"), std::string::npos) << log;
  EXPECT_NE(log.find("eta"), std::string::npos) << log;
  EXPECT_EQ(log.find('\r'), std::string::npos);
  EXPECT_EQ(log.find('\033'), std::string::npos);
}

// A run killed after its last checkpoint had written rows (and event points) past it: the resumed
// run drops them, so every step and epoch appears once, in order; train.log is appended to.
TEST(Watch, ResumeDropsRowsPastTheCheckpoint) {
  const std::string runs = fresh_dir("resume");
  json first = tiny_config(runs);
  apply_overrides(first, {"train.stop_after=1"});
  const TrainResult a = train(first, false);
  // What a run killed in epoch 2 would have left past the checkpoint at step 6.
  std::ofstream(a.run_dir + "/metrics.jsonl", std::ios::app)
      << "{\"kind\": \"step\", \"step\": 8, \"epoch\": 2, \"loss\": 9}\n{\"kind\": \"step\", \"st";
  std::ofstream(a.run_dir + "/metrics.csv", std::ios::app) << "2,12,0.1,9,0,9,0,0,1,0,1,0,0\n";
  {
    EventWriter orphan(a.run_dir);  // a later file name than the first run's
    orphan.scalars(8, {{"train/loss", 9}});
    orphan.scalars(12, {{"val/top1", 0.01}});
  }
  const std::string log_before = read_text(a.run_dir + "/train.log");
  json second = tiny_config(runs);
  apply_overrides(second, {"resume=" + a.run_dir});
  const TrainResult b = train(second, false);
  ASSERT_EQ(b.run_dir, a.run_dir);

  const std::vector<nlohmann::json> rows = jsonl(b.run_dir + "/metrics.jsonl");
  EXPECT_EQ(steps_of(rows, "step"), (std::vector<int64_t>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(steps_of(rows, "epoch"), (std::vector<int64_t>{6, 12}));
  for (const auto& row : rows) EXPECT_NE(row.value("loss", 0.0), 9.0) << "an orphan row is left: " << row.dump();
  std::stringstream csv(read_text(b.run_dir + "/metrics.csv"));
  std::vector<std::string> lines;
  for (std::string l; std::getline(csv, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u) << "a header and one row per epoch";
  EXPECT_EQ(lines[2].rfind("2,12,", 0), 0u);
  EXPECT_EQ(lines[2].find(",9,0,9,"), std::string::npos);

  int starts = 0;
  const auto sc = scalars_of_run(b.run_dir, &starts);
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(sc.at("train/loss").size(), 6u);
  EXPECT_NE(sc.at("train/loss").at(8), 9.0f) << "the orphan point at step 8 is purged, the resumed run's stands";
  EXPECT_NEAR(sc.at("val/top1").at(12), b.val_top1, 1e-6);
  const std::vector<EventRecord> newest = read_event_file(event_files(b.run_dir).back());
  ASSERT_GE(newest.size(), 2u);
  EXPECT_EQ(newest[1].session_status, 1);
  EXPECT_EQ(newest[1].step, 7) << "START at the first step after the checkpoint's";

  const std::string log = read_text(b.run_dir + "/train.log");
  EXPECT_EQ(log.rfind(log_before, 0), 0u) << "appended, not rewritten";
  EXPECT_NE(log.find("resumed " + a.run_dir, log_before.size()), std::string::npos) << log;
}

TEST(Watch, TensorboardCanBeTurnedOff) {
  const std::string runs = fresh_dir("off");
  json c = tiny_config(runs);
  apply_overrides(c, {"train.tensorboard=false", "train.epochs=1"});
  const TrainResult r = train(c, true);
  EXPECT_TRUE(event_files(r.run_dir).empty());
  EXPECT_EQ(steps_of(jsonl(r.run_dir + "/metrics.jsonl"), "step"), (std::vector<int64_t>{2, 4, 6}));
}

// A GPU run's step rows carry the interval's share of time the host spent blocked on the device
// (core/host_wait.h); a CPU run's (blocked_seconds < 0) have no such key.
TEST(Watch, StepRowsCarryTheHostBlockedShareOnDevicesOnly) {
  const std::string dir = fresh_dir("blocked");
  {
    MetricsLog log(dir);
    StepSample s;
    s.epoch = 0, s.lr = 0.1, s.world = 1;
    s.step = 10, s.seen = 640, s.seconds = 2.0, s.blocked_seconds = 0.5;
    log.write_step(s);
    s.step = 20, s.seen = 1280, s.seconds = 4.0, s.blocked_seconds = 0.6;
    log.write_step(s);
    s.step = 30, s.seen = 1920, s.seconds = 6.0, s.blocked_seconds = -1;  // as on the CPU
    log.write_step(s);
  }
  const std::vector<nlohmann::json> rows = jsonl(dir + "/metrics.jsonl");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_NEAR(rows[0].at("host_blocked_share").get<double>(), 0.25, 1e-12);
  EXPECT_NEAR(rows[1].at("host_blocked_share").get<double>(), 0.05, 1e-12) << "the interval's, not the epoch's";
  EXPECT_FALSE(rows[2].contains("host_blocked_share")) << rows[2].dump();
  EXPECT_NEAR(rows[1].at("images_per_s").get<double>(), 320.0, 1e-9);
}
