// `kiln compare RUN RUN ...` (docs/sweeps.md): what differs between runs and how they ended, side by side.
// The keys whose values differ between the runs' config.json (changed_keys of tools/engine/run_history.h,
// the run's name left out: it heads each column), the final metrics of each run (summary.h's read_run), and
// the validation top-1 curves of every run overlaid in one PNG.
// Tests: tests/sweep/summary_test.cpp (compare_runs on run folders written by the test).
#pragma once
#include <string>
#include <vector>

namespace kiln::sweep {

// The comparison as text (two Markdown tables), and the curves in `png` ("" for none). Every run must be a
// run folder (config.json); errors name the argument.
std::string compare_runs(const std::vector<std::string>& runs, const std::string& png);

}  // namespace kiln::sweep
