// Running a sweep (docs/sweeps.md): each run is a child `kiln train` process in its own run folder
// (runs/<sweep>/<run>/, an ordinary run: eval, predict, export, TensorBoard work on it), its output in
// runs/<sweep>/logs/<run>.log. A run not started is started from runs/<sweep>/configs/<run>.json; a run
// stopped or interrupted is resumed with `kiln train RUN` (mid-epoch, by the trainer's rule); a run that
// started but has no checkpoint to resume from is moved to runs/<sweep>/restarted/ and started again; a
// finished run is kept; a failed run (non-zero exit) is recorded in failed.json with its error and the sweep
// goes on; it is run again only with retry=failed. The summary is rewritten whenever a run ends.
//
// Placement: with devices (GPUs) one run per device at a time, or a run whose variant sets train.device
// to several takes them all; without, `parallel` runs at a time with the cores split between them
// (train.threads = cores / parallel for runs started here); parallel=auto (the default) is 2 when every run
// trains on the CPU and it has 2 cores or more (measured faster than one run on every core, docs/sweeps.md),
// else 1.
//
// SIGINT/SIGTERM: forwarded to the runs in flight (each finishes its step, saves and exits), except to a run
// whose log shows it got the signal itself (a scheduler such as SLURM signals every process of a job: a
// second signal would stop the run unsaved); no new run starts, and the command that continues the sweep is
// printed. A second signal is forwarded to every run (they exit at once). Children run in their own process group (a terminal's Ctrl-C reaches them once, through
// the sweep) and get SIGTERM if the sweep dies.
// One sweep process per sweep folder: it holds runs/<sweep>/.lock (tools/engine/run_lock.h).
// Tests: tests/sweep/sweep_process_test.cpp (real processes and signals), tests/sweep/plan_test.cpp (take_devices).
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "tools/sweep/plan.h"

namespace kiln::sweep {

struct RunnerOptions {
  std::string kiln;     // the kiln executable that trains the runs
  Placement placement;  // devices / parallel
  bool retry_failed = false;
  int64_t cores = 0;    // the CPU cores to split with parallel > 1 (0: those this process may run on)
};

// Runs the plan's runs that are not finished (nor failed, unless retry_failed); returns 0 when every run is
// finished, 1 when some failed, 128 + the signal when SIGINT/SIGTERM stopped it with runs left. Progress goes
// to `out`.
int run_sweep(const SweepPlan& plan, const RunnerOptions& opt, std::ostream& out);

// The devices a run needs out of `free` (removed from it into *taken): `need` empty takes any one; else all of
// `need`. False (nothing taken) when they are not all free.
bool take_devices(const std::vector<std::string>& need, std::vector<std::string>& free, std::vector<std::string>* taken);

// The devices a variant's own train.device asks for ("0,1" -> {"0", "1"}), or empty when it sets none.
std::vector<std::string> variant_devices(const Variant& v);

// The sweep's ETA in seconds: every run takes `mean_run_s` (the mean of those ended); a run in flight
// for e seconds the rest, max(0, mean - e); then `waiting` runs, each on the slot free first, of
// `slots` slots (at least the runs in flight).
double sweep_eta_seconds(double mean_run_s, const std::vector<double>& in_flight_elapsed_s, size_t waiting, int64_t slots);

}  // namespace kiln::sweep
