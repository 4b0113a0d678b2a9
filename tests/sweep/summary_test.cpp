// The sweep's table (tools/sweep/summary.h) and kiln compare (tools/sweep/compare.h) over run folders the
// test writes (metrics.csv, invocations.jsonl as kiln train writes them): the mean and sample standard
// deviation per variant against a computation from the definition, only finished runs averaged, the best
// variant, the expected figure's difference and two-std test, the files and plots written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tools/sweep/compare.h"
#include "tools/sweep/run_state.h"
#include "tools/sweep/summary.h"

using namespace kiln;
using namespace kiln::sweep;
namespace fs = std::filesystem;

namespace {

// A run folder with one metrics row per val_top1 (fractions), and its invocations (ended or not).
void write_run(const fs::path& dir, const std::vector<double>& top1, const std::string& outcome, double lr = 0.1,
               double final_tta_top1 = -1) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << json{{"name", dir.filename().string()}, {"optim", {{"lr", lr}}}}.dump();
  std::ofstream m(dir / "metrics.csv");
  m << "epoch,step,lr,train_loss,train_acc,val_loss,val_top1,val_top5,images_per_s,data_wait_share,epoch_seconds\n";
  for (size_t i = 0; i < top1.size(); ++i)
    m << i + 1 << "," << 10 * (i + 1) << ",0.1,1.0,0.5," << 2.0 - top1[i] << "," << top1[i] << "," << std::min(1.0, top1[i] + 0.1)
      << "," << 1000 + 100 * i << ",0.01,3\n";
  std::ofstream inv(dir / "invocations.jsonl");
  inv << json{{"event", "start"}, {"time", 1000.0}}.dump() << "\n";
  json end{{"event", "end"}, {"outcome", outcome}, {"time", 1120.0}};
  if (final_tta_top1 >= 0) end.update(json{{"val_top1", final_tta_top1}, {"val_top5", 0.999}, {"val_loss", 0.25}, {"tta", "flip"}});
  if (!outcome.empty()) inv << end.dump() << "\n";
}

double sample_std(const std::vector<double>& v) {
  double mean = 0, ss = 0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

}  // namespace

TEST(SweepSummary, MeanAndSampleStdOfFinishedRunsOnlyBestMarkedExpectedCompared) {
  const fs::path d = fs::temp_directory_path() / ("kiln_sweep_summary_" + std::to_string(getpid()));
  fs::remove_all(d);
  SweepPlan plan;
  plan.name = "t";
  plan.dir = d.string();
  plan.seeds = {0, 1, 2};
  plan.variants.resize(2);
  plan.variants[0].label = "a";
  plan.variants[0].overrides = {"optim.lr=0.1"};
  plan.variants[0].has_expected = true;
  plan.variants[0].expected = Expected{80, "paper"};
  plan.variants[0].params = 1234;
  plan.variants[1].label = "b";
  plan.variants[1].overrides = {"optim.lr=0.2"};
  write_run(d / "a-s0", {0.70, 0.80}, "finished");
  write_run(d / "a-s1", {0.75, 0.78}, "finished");
  write_run(d / "a-s2", {0.60, 0.83}, "finished");
  write_run(d / "b-s0", {0.50, 0.90}, "finished");
  write_run(d / "b-s1", {0.99}, "");                 // unfinished: not averaged
  write_run(d / "b-s2", {0.99, 0.99}, "finished");  // failed below: not averaged
  record_failure(d.string(), "b-s2", "kiln: error: boom", 1);

  const Summary s = summarize(plan);
  ASSERT_EQ(s.variants.size(), 2u);
  const VariantRow& a = s.variants[0];
  EXPECT_EQ(a.finished, 3);
  EXPECT_EQ(a.planned, 3);
  EXPECT_NEAR(a.final_top1.mean, (80 + 78 + 83) / 3.0, 1e-9);
  EXPECT_NEAR(a.final_top1.std, sample_std({80, 78, 83}), 1e-9);
  EXPECT_NEAR(a.best_top1.mean, (80 + 78 + 83) / 3.0, 1e-9);
  EXPECT_NEAR(a.final_loss.mean, 2 - (0.80 + 0.78 + 0.83) / 3, 1e-9);
  EXPECT_NEAR(a.best_loss.std, sample_std({2 - 0.80, 2 - 0.78, 2 - 0.83}), 1e-9);
  EXPECT_NEAR(a.final_top5.mean, (90 + 88 + 93) / 3.0, 1e-9);
  EXPECT_NEAR(a.minutes.mean, 2.0, 1e-9) << "start 1000 s to end 1120 s";
  EXPECT_NEAR(a.images_per_s.mean, 1050, 1e-9);
  EXPECT_NEAR(a.expected_diff, (80 + 78 + 83) / 3.0 - 80, 1e-9);
  EXPECT_TRUE(a.within_2std);
  const VariantRow& b = s.variants[1];
  EXPECT_EQ(b.finished, 1);
  EXPECT_NEAR(b.final_top1.mean, 90, 1e-9);
  EXPECT_TRUE(std::isnan(b.final_top1.std)) << "one seed has no sample std";
  EXPECT_NEAR(b.best_top1.mean, 90, 1e-9);
  EXPECT_TRUE(b.best) << "90 > 80.33";
  EXPECT_FALSE(a.best);
  EXPECT_EQ(s.runs[3].run.name, "b-s1") << "seed by seed";
  EXPECT_EQ(s.runs[3].status.state, RunState::unfinished);
  EXPECT_EQ(s.runs[5].status.state, RunState::failed);
  EXPECT_EQ(s.runs[5].status.error, "kiln: error: boom");

  write_summary(s, d.string());
  const std::string md = [&] {
    std::ifstream in(d / "summary.md");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  EXPECT_NE(md.find("| a | 3 of 3 | 80.33 ± 2.52 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| b ★ | 1 of 3 | 90.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1234 | 80.00 (paper) | +0.33 | yes |"), std::string::npos) << md;
  EXPECT_NE(md.find("| b-s2 | b | 2 | failed: kiln: error: boom |"), std::string::npos) << md;
  const json j = json::parse(std::ifstream(d / "summary.json"));
  EXPECT_NEAR(j["variants"][0]["final_top1"]["std"].get<double>(), sample_std({80, 78, 83}), 1e-9);
  EXPECT_EQ(j["runs"][3]["state"], "unfinished");
  std::ifstream csv(d / "summary.csv");
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);
  EXPECT_EQ(header.rfind("variant,seeds_finished,seeds_planned,final_top1_mean,final_top1_std,", 0), 0u) << header;
  EXPECT_EQ(row.rfind("a,3,3,80.3333,2.51661,", 0), 0u) << row;
  for (const char* png : {"top1.png", "curves.png"}) {
    std::ifstream in(d / png, std::ios::binary);
    char sig[4] = {};
    in.read(sig, 4);
    EXPECT_EQ(std::string(sig + 1, 3), "PNG") << png;
  }

  // kiln compare: the key that differs, both runs' final figures, the curves.
  write_run(d / "c", {0.5, 0.6}, "finished", 0.3);
  const std::string cmp = compare_runs({(d / "a-s0").string(), (d / "c").string()}, (d / "cmp.png").string());
  EXPECT_NE(cmp.find("keys that differ (1):"), std::string::npos) << cmp;
  EXPECT_NE(cmp.find("| optim.lr | 0.1 | 0.3 |"), std::string::npos) << cmp;
  EXPECT_NE(cmp.find("| final top-1 | 80.00 | 60.00 |"), std::string::npos) << cmp;
  EXPECT_TRUE(fs::exists(d / "cmp.png"));
  fs::remove_all(d);
}

// A run with train.tta: its final figure is the test-time-augmented evaluation kiln train prints and
// records at its end (invocations.jsonl), not metrics.csv's last row; best counts it too.
TEST(SweepSummary, TheFinalFigureIsTheRunsOwnWithTestTimeAugmentation) {
  const fs::path d = fs::temp_directory_path() / ("kiln_sweep_summary_tta_" + std::to_string(getpid()));
  fs::remove_all(d);
  write_run(d / "tta", {0.90, 0.9446}, "finished", 0.1, /*final_tta_top1=*/0.9478);
  write_run(d / "old", {0.90, 0.9446}, "finished");  // an end record without figures: the last epoch
  const RunMetrics t = read_run((d / "tta").string());
  EXPECT_NEAR(t.final_top1, 94.78, 1e-9);
  EXPECT_NEAR(t.final_top5, 99.9, 1e-9);
  EXPECT_NEAR(t.final_loss, 0.25, 1e-12);
  EXPECT_EQ(t.final_tta, "flip");
  EXPECT_NEAR(t.best_top1, 94.78, 1e-9);
  EXPECT_EQ(t.curve_top1.size(), 2u) << "the curve is the epochs' evaluations";
  const RunMetrics o = read_run((d / "old").string());
  EXPECT_NEAR(o.final_top1, 94.46, 1e-9);
  EXPECT_EQ(o.final_tta, "");
  fs::remove_all(d);
}
