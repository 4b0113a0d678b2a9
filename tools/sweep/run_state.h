// Where each run of a sweep stands, read from its folder (docs/sweeps.md): runs/<sweep>/<run>/invocations.jsonl
// says how each `kiln train` of it ended (tools/engine/run_history.h), and runs/<sweep>/failed.json holds
// the runs whose last attempt failed, with the error (the sweep records them; `retry=failed` clears them).
// Tests: tests/sweep/sweep_process_test.cpp (real runs), tests/sweep/plan_test.cpp.
#pragma once
#include <string>

#include "core/json_reader.h"

namespace kiln::sweep {

enum class RunState {
  pending,     // not started: no run folder
  unfinished,  // started, not ended (killed, or being trained by another process): resumed next
  stopped,     // its last invocation ended early (a signal, train.stop_after): resumed next
  finished,    // trained to its end (or stopped by train.early_stopping)
  failed,      // its last attempt failed (failed.json); run again only with retry=failed
  running,     // being trained by this sweep now
};
const char* state_name(RunState s);

struct RunStatus {
  RunState state = RunState::pending;
  std::string error;  // failed: the error its log ended with
  int exit_code = 0;  // failed: the child's exit code
};

// The state of run `run` of the sweep in `sweep_dir` (never `running`: only the sweep in flight knows that).
RunStatus run_status(const std::string& sweep_dir, const std::string& run);

// The end row of the last invocation in <run_dir>/invocations.jsonl, or null when the last one has none (or
// there is no file).
json last_end_row(const std::string& run_dir);

// runs/<sweep>/failed.json: {run: {"error", "exit_code", "when"}}.
void record_failure(const std::string& sweep_dir, const std::string& run, const std::string& error, int exit_code);
void clear_failure(const std::string& sweep_dir, const std::string& run);
json read_failures(const std::string& sweep_dir);

}  // namespace kiln::sweep
