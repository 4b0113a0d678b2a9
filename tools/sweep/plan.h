// A sweep's plan (docs/sweeps.md): a base config, its variants (a grid's points and labelled variants,
// each a list of key=value overrides as `kiln train` takes them), the seeds, and an optional expected
// figure per variant with its source. Read from a sweep file or the command line
// (`kiln sweep CONFIG model.depth=20,32,56 seeds=0,1,2`), written to runs/<sweep>/sweep.json before
// anything runs, and compared with the plan already there when a sweep is continued.
// Runs are named <variant>-s<seed> and ordered seed by seed (every variant's first seed, then the next),
// so a partial sweep already compares every variant.
// Tests: tests/sweep/plan_test.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/json_reader.h"

namespace kiln::sweep {

// A paper's figure for a variant: its top-1 (percent) and where it comes from.
struct Expected {
  double top1 = 0;     // percent, as papers print it
  std::string source;  // "He et al. 2016, Table 6"
};

struct Variant {
  std::string label;                   // the run folders' prefix: "depth20", "wide"
  std::vector<std::string> overrides;  // "model.depth=20", applied to the base as kiln train's key=value
  bool has_expected = false;
  Expected expected;
  int64_t params = 0;  // the model's parameters, counted when the plan was validated
};

struct SweepPlan {
  std::string name;  // the sweep's folder name
  std::string dir;   // <base's train.runs_dir>/<name>: the sweep folder
  json base;         // the base config, the sweep-wide overrides applied (not resolved)
  std::vector<Variant> variants;
  std::vector<int64_t> seeds;  // train.seed of each run
};

// One run of the plan.
struct PlannedRun {
  std::string name;  // "<variant label>-s<seed>": its folder under the sweep's
  size_t variant = 0;
  int64_t seed = 0;
};
// Every run, seed by seed: variant 0..V-1 with seeds[0], then with seeds[1], ...
std::vector<PlannedRun> planned_runs(const SweepPlan& plan);

// The config a run trains: the base, the variant's overrides, train.seed, name = the run's name and
// train.runs_dir = the sweep folder (so it trains in <sweep folder>/<run name>).
json run_config(const SweepPlan& plan, const PlannedRun& run);

// What `kiln sweep` reads besides the plan: how runs are placed.
struct Placement {
  std::vector<std::string> devices;  // devices=0,1,2,3: one run per GPU at a time; empty: the runs' own
  // Runs at a time when devices is empty, the cores split between them; 0 (parallel=auto, the default): 2 when
  // every run trains on the CPU and it has 2 cores or more, else 1 (measured faster, docs/sweeps.md).
  int64_t parallel = 0;
};

// `kiln sweep CONFIG [key=v1,v2,...] [seeds=0,1,2] [name=NAME] [devices=...] [parallel=N] [key=value ...]`,
// the arguments after CONFIG: a value with commas is a grid axis (every combination is a variant), except
// for train.device/device, whose value is one device list; seeds=, name=, devices=, parallel= are the
// sweep's; the rest are overrides of the base. `config_file` is read with load_config_file.
SweepPlan plan_from_command_line(const std::string& config_file, const std::vector<std::string>& args,
                                 Placement* placement);
// A sweep file (docs/sweeps.md): {"name", "base": FILE or {config}, "set": {key: value}, "grid": {key: [values]},
// "variants": [{"label", "set": {key: value}, "expected": {"top1", "source"}}], "expected": {label: {...}},
// "seeds": [...], "devices": "0,1" | [0, 1], "parallel": N}. Relative paths are the file's folder's.
// Errors name the file and the JSON path. Without grid and variants the plan is one variant, "base".
SweepPlan plan_from_file(const std::string& file, Placement* placement);
// Whether `path` is a sweep file (a JSON object with "base", "grid" or "variants", keys no training config
// has) rather than a training config.
bool is_sweep_file(const std::string& path);

// Checks the plan before anything runs: at least one variant, no empty grid axis (refused while reading), no
// two variants with one label or the same overrides, seeds >= 0 and distinct; then every variant's config
// (with the first seed) through `validate`, which throws as kiln train would and returns the model's parameter
// count (stored in the variant). An error names the variant: "kiln sweep: variant 'depth21' (model.depth=21): ...".
using Validate = std::function<int64_t(const json& run_config)>;
void validate_plan(SweepPlan& plan, const Validate& validate);

json plan_to_json(const SweepPlan& plan);
// `source` names the file in errors.
SweepPlan plan_from_json(const json& j, const std::string& source);

// What differs between the plan in a sweep folder and a new one, one line each, leaving out what only adds
// (new variants, new seeds): a changed base key ("base: optim.lr: 0.1 -> 0.05"), a variant whose overrides
// changed or that is missing, a seed that is missing, another name. Empty: the new plan continues the old.
std::vector<std::string> plan_changes(const SweepPlan& before, const SweepPlan& after);

// A folder-safe label from a grid point's overrides: "model.depth=20" -> "depth20", with several axes
// joined by "_" ("depth20_lr0.05"); characters other than letters, digits, '.', '-' become '_'.
std::string grid_label(const std::vector<std::string>& overrides);

}  // namespace kiln::sweep
