// Where each run of a sweep stands (run_state.h).
#include "tools/sweep/run_state.h"

#include <filesystem>
#include <fstream>

#include "tools/engine/metrics.h"  // write_file_atomically
#include "tools/engine/run_lock.h"  // local_time_text

namespace fs = std::filesystem;

namespace kiln::sweep {

const char* state_name(RunState s) {
  switch (s) {
    case RunState::pending: return "pending";
    case RunState::unfinished: return "unfinished";
    case RunState::stopped: return "stopped";
    case RunState::finished: return "finished";
    case RunState::failed: return "failed";
    case RunState::running: return "running";
  }
  return "?";
}

json last_end_row(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "invocations.jsonl");
  json last;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object()) continue;  // a line cut short by a kill
    if (row.value("event", "") == "start") last = nullptr;
    else if (row.value("event", "") == "end") last = row;
  }
  return last;
}

json read_failures(const std::string& sweep_dir) {
  std::ifstream in(fs::path(sweep_dir) / "failed.json");
  if (!in.good()) return json::object();
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

void record_failure(const std::string& sweep_dir, const std::string& run, const std::string& error, int exit_code) {
  json f = read_failures(sweep_dir);
  f[run] = {{"error", error}, {"exit_code", exit_code}, {"when", local_time_text()}};
  write_file_atomically((fs::path(sweep_dir) / "failed.json").string(), f.dump(2) + "\n");
}

void clear_failure(const std::string& sweep_dir, const std::string& run) {
  json f = read_failures(sweep_dir);
  if (!f.contains(run)) return;
  f.erase(run);
  write_file_atomically((fs::path(sweep_dir) / "failed.json").string(), f.dump(2) + "\n");
}

RunStatus run_status(const std::string& sweep_dir, const std::string& run) {
  RunStatus s;
  const json failures = read_failures(sweep_dir);
  if (failures.contains(run)) {
    s.state = RunState::failed;
    s.error = failures[run].value("error", "");
    s.exit_code = failures[run].value("exit_code", 0);
    return s;
  }
  const fs::path dir = fs::path(sweep_dir) / run;
  if (!fs::exists(dir)) return s;
  const json end = last_end_row(dir.string());
  if (end.is_null()) {
    s.state = RunState::unfinished;
    return s;
  }
  const std::string outcome = end.value("outcome", "");
  s.state = outcome == "finished" || outcome == "stopped by train.early_stopping" ? RunState::finished : RunState::stopped;
  return s;
}

}  // namespace kiln::sweep
