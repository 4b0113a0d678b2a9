// The signal flags of tools/engine/interrupt.h. The handler touches only lock-free atomics and
// write(2)/_exit(2), which are async-signal-safe.
#include "tools/engine/interrupt.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "core/check.h"
#include "tools/engine/console_log.h"

namespace kiln {

namespace {

std::atomic<int> g_stop{0};
std::atomic<bool> g_save{false};
std::atomic<bool> g_installed{false};
std::atomic<int> g_say_fd{STDERR_FILENO};  // stderr as it was at install: `kiln train` pipes it into train.log
struct sigaction g_old_int, g_old_term, g_old_usr1;

// Two buffers for the second signal's note: the trainer writes the one not in use, then publishes it.
char g_notes[2][1024] = {"nothing is saved yet", ""};
std::atomic<const char*> g_note{g_notes[0]};

void say_to(int fd, const char* s) {
  if (fd < 0) return;
  const ssize_t n = ::write(fd, s, std::strlen(s));
  (void)n;
}

// To the terminal (stderr as it was before the capture) and to train.log's file, if attached.
void say(const char* s) {
  say_to(g_say_fd.load(), s);
  say_to(console_log_fd(), s);
}

void on_signal(int sig) {
  if (sig == SIGUSR1) {
    g_save.store(true);
    return;
  }
  int none = 0;
  if (!g_stop.compare_exchange_strong(none, sig)) {
    // Straight to the terminal and the log: what goes through train.log's pipe would die with the process.
    say(sig == SIGINT ? "\nkiln: second SIGINT: exiting now; " : "\nkiln: second SIGTERM: exiting now; ");
    say(g_note.load());
    say("\n");
    ::_exit(128 + sig);
  }
  say(sig == SIGINT ? "\nkiln: SIGINT: finishing the step in flight, then saving (a second one exits at once)\n"
                    : "\nkiln: SIGTERM: finishing the step in flight, then saving (a second one exits at once)\n");
}

}  // namespace

void set_second_signal_note(const std::string& note) {
  char* spare = g_note.load() == g_notes[0] ? g_notes[1] : g_notes[0];
  const size_t n = std::min(note.size(), sizeof g_notes[0] - 1);
  std::memcpy(spare, note.data(), n);
  spare[n] = '\0';
  g_note.store(spare);
}

SignalWatch::SignalWatch() {
  KILN_CHECK(!g_installed.exchange(true), "SignalWatch: the signal handlers are already installed");
  g_stop.store(0);
  g_save.store(false);
  set_second_signal_note("nothing is saved yet");
  g_say_fd.store(::dup(STDERR_FILENO));
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and waits in other threads go on
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGUSR1, &sa, &g_old_usr1);
}

SignalWatch::~SignalWatch() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGUSR1, &g_old_usr1, nullptr);
  const int fd = g_say_fd.exchange(STDERR_FILENO);
  if (fd != STDERR_FILENO && fd >= 0) ::close(fd);
  g_installed.store(false);
}

int stop_signal() { return g_stop.load(); }

bool take_save_request() { return g_save.exchange(false); }

void request_signal(int sig) {
  if (sig == 0) {
    g_stop.store(0);
    g_save.store(false);
  } else if (sig == SIGUSR1) {
    g_save.store(true);
  } else {
    int none = 0;
    g_stop.compare_exchange_strong(none, sig);
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: {
      static thread_local char buf[32];
      std::snprintf(buf, sizeof buf, "signal %d", sig);
      return buf;
    }
  }
}

}  // namespace kiln
