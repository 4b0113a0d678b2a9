// Training progress: on a terminal, one line redrawn in place with a bar; otherwise (logs, CI) a
// plain line every `every` steps (or every `every_seconds`) and at the end of each phase.
//   train 2/3 [##########----------]  470/938  loss 0.3124  acc 88.9%  lr 0.0412  2431 img/s  data 3%  0:42 eta 0:41, run eta 1:02:10
// The times: the epoch's elapsed time and what is left of it at its pace so far, and what is left
// of the run (this invocation's epochs) at the pace of the steps so far, evaluations included.
// Tests: tests/engine/watch_test.cpp.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kiln {

class Progress {
 public:
  Progress(std::string phase, int epoch, int epochs, int64_t total_steps, bool tty, int64_t every = 0,
           double every_seconds = 0);
  // Called after each step with the running averages and the extra fields (lr, img/s, data share).
  void update(int64_t step, const std::string& fields);
  // Ends the phase: prints the final line (with a newline).
  void finish(const std::string& fields);
  // Ends the phase without a line: a terminal's bar is erased (the caller prints its own summary).
  void clear();
  // Whether stdout is a terminal (before ConsoleCapture made it a pipe: tools/engine/console_log.h).
  static bool stdout_is_tty();

 private:
  std::string line(int64_t step, const std::string& fields) const;
  std::string phase_;
  int epoch_, epochs_;
  int64_t total_;
  bool tty_;
  int64_t every_;
  double every_seconds_;
  std::chrono::steady_clock::time_point last_draw_;
  bool drawn_ = false;
};

// A duration as a clock shows it: "42s", "3:05", "1:02:03", "2d 03:04:05"; "?" when not finite.
std::string format_duration(double seconds);

// Seconds left at the pace so far: `done` of `total` units took `elapsed` seconds (NaN before any).
double eta_seconds(double elapsed, double done, double total);

// The progress line's times: "0:42 eta 0:41, run eta 1:02:10" (epoch elapsed, the epoch's ETA, the
// run's ETA); at the epoch's end "epoch 1:23, run eta 1:02:10"; the run's part is left out when
// nothing of the run is left after this epoch.
std::string time_fields(double epoch_elapsed, int64_t epoch_done, int64_t epoch_total, double run_elapsed,
                        int64_t run_done, int64_t run_total);

// Where the run's clock starts: the first step this invocation trains (set at its first progress line).
struct RunClock {
  bool started = false;
  std::chrono::steady_clock::time_point start;
  int64_t start_step = 0;
};

}  // namespace kiln
