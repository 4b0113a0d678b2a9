// A run folder has one writer (docs/training.md, "One writer per run folder"). `kiln train` (a new
// run, a resume, a sweep's member) holds an exclusive lock on runs/<name>/.lock for its lifetime:
// flock(2) on an open descriptor, which the kernel releases when the process ends however it ends
// (kill -9 included), so there is nothing to clean up. The file names the holder (host, PID, since
// when, the command line) for the refusal a second writer gets. Readers (eval, predict, export,
// config show, TensorBoard) take no lock: checkpoints are switched in whole.
// On a filesystem without working locks (some NFS setups: flock fails with ENOLCK) the run goes on
// with a warning; where the filesystem accepts the lock but does not share it between machines, two
// machines are not kept apart (docs/training.md says which).
// Tests: tests/cli/run_lock_test.cpp (real kiln train processes, kill -9 of the holder).
#pragma once
#include <string>

namespace kiln {

class RunLock {
 public:
  // Takes the lock of `run_dir` (creating runs/<name>/.lock) or throws naming the holder.
  // `what` names the caller in messages ("kiln train").
  explicit RunLock(const std::string& run_dir, const std::string& what = "kiln train");
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  // False when the filesystem refused locks (ENOLCK, EOPNOTSUPP): the run went on unlocked.
  bool held() const { return held_; }

 private:
  int fd_ = -1;
  bool held_ = false;
};

// The holder recorded in `run_dir`'s lock file ("host H, PID P, since T: COMMAND"), or "" when none
// is recorded. Whether it still holds the lock is for RunLock to find out.
std::string run_lock_holder(const std::string& run_dir);

// This process's command line as typed (from /proc/self/cmdline), arguments joined by spaces;
// "" where it cannot be read.
std::string process_command_line();

// This machine's host name ("?" where it cannot be read).
std::string host_name();

// The local time now as "2026-12-07 03:41:07 +0000".
std::string local_time_text();

// The command that resumes `run_dir`, for the messages that tell the user how to continue a run:
// "<command> <run_dir>" once set_resume_command(command) has been called (kiln::cli::main sets
// "<its program's name> train": "kiln train", or "user_kiln train" for a program's own kiln); before
// that, in a program that calls kiln::train itself, `kiln::train("<run_dir>")`.
std::string resume_command(const std::string& run_dir);
void set_resume_command(const std::string& command);

}  // namespace kiln
