// Run folder and metric logs: runs/<name>/ (runs/<name>-2 ... when taken) holding config.json (the
// config as run), metrics.csv and metrics.jsonl (one row per epoch), checkpoints and plots.
#pragma once
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace kiln {

// Creates a fresh run folder under `root` named `name` (or name-2, name-3, ...); returns its path.
std::string make_run_dir(const std::string& root, const std::string& name);

// Writes `bytes` to `path` + ".tmp", then renames it over `path` (a kill leaves the old file or the
// new one, never a part); errors name the file.
void write_file_atomically(const std::string& path, const std::string& bytes);

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& dir);  // appends to dir/metrics.csv and dir/metrics.jsonl
  // One row: the columns are fixed by the first row written.
  void write(const std::vector<std::pair<std::string, double>>& row);
  // Every row so far (also those of an earlier run that was resumed), by column.
  const std::map<std::string, std::vector<double>>& columns() const { return columns_; }
  // The run's plots in `dir`: loss.png (train and val loss), accuracy.png (train accuracy and val
  // top-1, in %) and lr.png (the learning rate at each epoch's end), by epoch.
  void save_plots(const std::string& dir) const;

 private:
  std::string dir_;
  std::vector<std::string> header_;
  std::map<std::string, std::vector<double>> columns_;
};

// Line plot(s) of `series` (x = epoch) saved as a PNG; several series share axes.
void save_plot_png(const std::string& path, const std::string& title,
                   const std::vector<std::pair<std::string, std::vector<double>>>& series, const std::string& xlabel);

}  // namespace kiln
