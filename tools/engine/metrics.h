// Run folder and metric logs: runs/<name>/ (runs/<name>-2 ... when taken) holding config.json (the
// config as run), metrics.csv (one row per epoch), metrics.jsonl (one JSON object a line: "kind":
// "step" every log interval, "kind": "epoch" at each epoch's end), TensorBoard event files
// (tools/engine/tensorboard.h), checkpoints and plots. A resumed run drops the rows written after
// its checkpoint's step (a run killed past its last checkpoint has no duplicates or orphans).
// Tests: tests/engine/watch_test.cpp.
#pragma once
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

class EventWriter;

// Creates a fresh run folder under `root` named `name` (or name-2, name-3, ...); returns its path.
std::string make_run_dir(const std::string& root, const std::string& name);

// Writes `bytes` to `path` + ".tmp", then renames it over `path` (a kill leaves the old file or the
// new one, never a part); errors name the file.
void write_file_atomically(const std::string& path, const std::string& bytes);

// What the epoch loop knows at a log interval: its epoch's running sums (this rank's), from which
// the interval since the previous sample is taken.
struct StepSample {
  int64_t step = 0;   // optimizer steps done in the run
  int64_t epoch = 0;  // 0-based
  double loss_sum = 0, correct = 0, seen = 0;  // the epoch's so far (this rank's)
  double seconds = 0, wait_seconds = 0;        // the epoch's training time and the loader's wait so far
  double lr = 0;
  double loss_scale = 0;  // fp16's; 0 without
  int world = 1;          // ranks: images/s counts every rank's (equal shards)
  // On a device with its own memory (a GPU): the host's time blocked waiting for it in the epoch so far
  // (core/host_wait.h), written as the interval's host_blocked_share; < 0 (the CPU): not written.
  double blocked_seconds = -1;
};

// One step row: the figures of the interval that ends at `step`.
struct StepRow {
  int64_t step = 0, epoch = 0;  // epoch 1-based
  double loss = 0, acc = 0, lr = 0, images_per_s = 0, data_wait_share = 0, loss_scale = 0;
  double time = 0;  // Unix time
};

class MetricsLog {
 public:
  // Appends to dir/metrics.csv and dir/metrics.jsonl; `resumed_step` >= 0 (train.resume) first drops
  // the rows of steps after it. `tensorboard`: also a new event file, which with a resume starts with
  // a SessionLog START at resumed_step + 1.
  explicit MetricsLog(const std::string& dir, int64_t resumed_step = -1, bool tensorboard = false);
  ~MetricsLog();
  // One epoch row: the columns are fixed by the first row written.
  void write(const std::vector<std::pair<std::string, double>>& row);
  // One step row from the epoch's sums (the interval since the previous sample of the same epoch).
  void write_step(const StepSample& s);
  // Every epoch row so far (also those of an earlier run that was resumed), by column.
  const std::map<std::string, std::vector<double>>& columns() const { return columns_; }
  const std::vector<StepRow>& steps() const { return steps_; }
  // The run's plots in `dir` (rewritten each call): loss.png (train loss at each log interval, val
  // loss at epoch ends), accuracy.png (train accuracy and val top-1, %) and lr.png, by step.
  void save_plots(const std::string& dir) const;

 private:
  void truncate_after(int64_t step);
  std::string dir_;
  std::vector<std::string> header_;
  std::map<std::string, std::vector<double>> columns_;
  std::vector<StepRow> steps_;
  StepSample last_;  // the previous sample (its epoch's sums)
  std::unique_ptr<EventWriter> events_;
};

// The y axis of a plot: [lo, hi], logarithmic or not; a linear one has a tick every `step` (a round
// number: 1, 2, 2.5 or 5 times a power of ten) and ends on one.
struct PlotAxis {
  double lo = 0, hi = 1;
  bool log = false;
  double step = 0.2;
};
// The round tick step (1, 2, 2.5 or 5 x 10^k) nearest above `raw` (> 0).
double nice_step(double raw);
// What a plot's values are: loss (>= 0; log scale when the positive values span more than a decade),
// percent (0..100), or a non-negative rate such as the learning rate.
enum class PlotKind { loss, percent, nonnegative };
// The axis for `values` (NaNs ignored): never below zero for any kind, percent within 0..100.
PlotAxis plot_axis(const std::vector<double>& values, PlotKind kind);

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;
  bool markers = false;  // a point at each value (few points: epochs), else a line only
};
// Line plot(s) of `series` saved as a PNG; several series share the axes (plot_axis of all values).
void save_plot_png(const std::string& path, const std::string& title, const std::vector<PlotSeries>& series,
                   const std::string& xlabel, PlotKind kind);

}  // namespace kiln
