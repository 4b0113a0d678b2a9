// A sweep's table (docs/sweeps.md, "The table"): runs/<sweep>/summary.md, summary.csv and summary.json,
// and the plots top1.png (each variant's final top-1, mean with +-1 sample-std error bars) and curves.png
// (each variant's validation top-1 by epoch, every seed, one colour a variant). Rewritten by the sweep as
// runs end and by `kiln sweep show`. Per variant: the finished seeds, mean and sample standard deviation
// (n - 1) of the final and best top-1, top-5 and loss, the minutes and images/s, the parameters; the best
// variant (highest mean final top-1) marked; with an expected figure, the difference and whether it lies
// within two standard deviations. Only finished runs are averaged; the others are listed with their state.
// Top-1 and top-5 are percent here (metrics.csv holds fractions).
// Also read by `kiln compare` (read_run).
// Tests: tests/sweep/summary_test.cpp.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tools/sweep/plan.h"
#include "tools/sweep/run_state.h"

namespace kiln::sweep {

// What a run folder's files say: metrics.csv's epochs (the evaluated ones), invocations.jsonl's times.
struct RunMetrics {
  bool has_metrics = false;  // at least one evaluated epoch
  int64_t epochs = 0;        // epoch rows in metrics.csv
  // The run's final evaluation (its end record: with train.tta the test-time-augmented one), else the
  // last evaluated epoch (top: percent).
  double final_top1 = NAN, final_top5 = NAN, final_loss = NAN;
  std::string final_tta;  // train.tta of the final figures ("" when they are the last epoch's)
  double best_top1 = NAN, best_top5 = NAN, best_loss = NAN;     // the highest top-1/top-5, the lowest loss
  double minutes = NAN;       // wall time of its invocations (start to end), else the sum of epoch_seconds
  double images_per_s = NAN;  // training images/s, mean over its epochs
  std::vector<double> curve_epoch, curve_top1;  // evaluated epochs (1-based) and their val top-1 (percent)
};
// Reads <run_dir>/metrics.csv and invocations.jsonl; a run without them has has_metrics false.
RunMetrics read_run(const std::string& run_dir);

// n values' mean and sample standard deviation (NaN when n < 2; mean NaN when n = 0).
struct Stat {
  int64_t n = 0;
  double mean = NAN, std = NAN;
};
Stat mean_std(const std::vector<double>& values);

struct RunRow {
  PlannedRun run;
  RunStatus status;
  RunMetrics metrics;
};

struct VariantRow {
  const Variant* variant = nullptr;
  int64_t finished = 0, planned = 0;
  Stat final_top1, final_top5, final_loss, best_top1, best_top5, best_loss, minutes, images_per_s;
  bool best = false;
  double expected_diff = NAN;  // mean final top-1 - expected (percentage points)
  bool within_2std = false;    // |diff| <= 2 std (needs 2 finished seeds)
};

struct Summary {
  std::string name;
  std::vector<RunRow> runs;  // plan order
  std::vector<VariantRow> variants;
};

// The table of `plan` (its runs in plan.dir); `running` names the runs this sweep is training now.
Summary summarize(const SweepPlan& plan, const std::vector<std::string>& running = {});

std::string summary_markdown(const Summary& s);
std::string summary_csv(const Summary& s);
json summary_json(const Summary& s);
// summary.md, summary.csv, summary.json, top1.png and curves.png in `dir` (each replaced whole).
void write_summary(const Summary& s, const std::string& dir);

}  // namespace kiln::sweep
