// The console saved in the run folder: runs/<name>/train.log holds what the run printed on stdout
// and stderr (both file descriptors, so also C stdio and libraries' warnings), while it still goes to
// the terminal. Capture starts with train() (tools/engine/train_launch.cpp), before the run folder
// exists: the lines printed until then (AutoBatch's report, ...) wait in memory and are written when
// the run folder attaches the file (appended on resume). A terminal's redraws are kept as final
// lines only: the text after a line's last '\r', without ANSI escapes. The capture ends (drained)
// when its ConsoleCapture goes; an error that ends the run is written as its last line.
// Tests: tests/engine/watch_test.cpp.
#pragma once
#include <string>

namespace kiln {

// One capture of this process's stdout and stderr (pipes read by a thread that copies to the
// original descriptors and to the log). Only one at a time: a second, while one is active, does
// nothing. Not for processes whose output others read by descriptor swapping at the same time.
class ConsoleCapture {
 public:
  ConsoleCapture();
  ~ConsoleCapture();  // stops: restores the descriptors, writes out every byte captured
  ConsoleCapture(const ConsoleCapture&) = delete;
  ConsoleCapture& operator=(const ConsoleCapture&) = delete;
  bool active() const { return active_; }
  // Writes `line` (an error that ends the run) into the log only.
  void note(const std::string& line);

 private:
  bool active_ = false;
};

// The active capture's log becomes `path` (opened for appending): `header` first (a line that
// starts this invocation's part of the log: when, which kiln, the command line; none when empty),
// then what was captured so far. Without an active capture: nothing (no train.log).
void attach_console_log(const std::string& path, const std::string& header = "");

// The attached log's file descriptor (appending), or -1: for the signal handler's lines, which
// cannot wait for the capture's thread (tools/engine/interrupt.h). Async-signal-safe.
int console_log_fd();

// Whether stdout was a terminal before the capture made it a pipe (Progress draws its bar by it).
bool console_is_tty();

// A terminal's text as a log keeps it: of each line the text after its last '\r' ("\r\n" ends a
// line as "\n" does), ANSI escape sequences removed. Fed chunk by chunk (a line or an escape may
// straddle two); returns the lines completed, each with its '\n'.
class LineFolder {
 public:
  std::string feed(const std::string& chunk);
  std::string finish();  // the unfinished line, if any, with a '\n'

 private:
  std::string line_;
  bool after_cr_ = false;
  int escape_ = 0;  // 1: after ESC, 2: inside a CSI sequence (ESC '[' ... final byte)
};

}  // namespace kiln
