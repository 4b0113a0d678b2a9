// Training progress: on a terminal, one line redrawn in place with a bar; otherwise (logs, CI) a
// plain line every `every` steps and at the end of each phase.
//   train 2/3 [##########----------]  470/938  loss 0.3124  acc 88.9%  lr 0.0412  2431 img/s  data 3%
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

namespace kiln {

class Progress {
 public:
  Progress(std::string phase, int epoch, int epochs, int64_t total_steps, bool tty, int64_t every = 0);
  // Called after each step with the running averages and the extra fields (lr, img/s, data share).
  void update(int64_t step, const std::string& fields);
  // Ends the phase: prints the final line (with a newline).
  void finish(const std::string& fields);
  static bool stdout_is_tty();

 private:
  std::string line(int64_t step, const std::string& fields) const;
  std::string phase_;
  int epoch_, epochs_;
  int64_t total_;
  bool tty_;
  int64_t every_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace kiln
