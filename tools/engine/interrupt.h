// Signals during training (docs/training.md, "Interrupting and resuming"):
//   SIGINT, SIGTERM  (Ctrl-C; what SLURM and most schedulers send before killing a job): the run
//                    finishes the step in flight, saves its `last` checkpoint at that step (mid-epoch:
//                    the loader's position and the epoch's figures with it), writes its plots, prints
//                    the command that resumes it and exits 130 (SIGINT) or 143 (SIGTERM). A signal
//                    during an evaluation abandons it (the save needs none). A second SIGINT/SIGTERM
//                    exits at once (128 + signal); a save it cuts short leaves the previous pair.
//   SIGUSR1          saves the `last` checkpoint after the step in flight, and training goes on.
// The handlers only set flags (async-signal-safe); the training loop polls them between steps, and
// ranks of a data-parallel run agree on the step they act at (trainer's InterruptPoll).
// Tests: tests/engine/interrupt_test.cpp (real signals to a real `kiln train`).
#pragma once
#include <string>

namespace kiln {

// Installs the handlers for SIGINT, SIGTERM and SIGUSR1 for its lifetime (the previous ones come back
// after), and clears the flags. One at a time: `kiln train` makes one around the whole run.
class SignalWatch {
 public:
  SignalWatch();
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
};

// The first SIGINT or SIGTERM received (its number), or 0.
int stop_signal();
// Whether a SIGUSR1 arrived since the last call (which clears it).
bool take_save_request();
// As if the signal had arrived (SIGINT/SIGTERM: stop; SIGUSR1: save); for tests and embedders that
// stop a run from another thread. 0 clears both flags.
void request_signal(int sig);
// "SIGINT", "SIGTERM", "SIGUSR1", else "signal N".
const char* signal_name(int sig);

// What a second SIGINT/SIGTERM says after "kiln: second SIGINT: exiting now; " (the trainer keeps it
// true: what is saved, what a save in flight means). The signal lines go to the terminal and to the
// console log's file (console_log.h) directly, not through the capture's pipe, whose bytes die with
// the process. Copied into a buffer the handler reads (at most 1000 characters).
void set_second_signal_note(const std::string& note);

}  // namespace kiln
