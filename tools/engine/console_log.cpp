// The console saved in the run folder (see console_log.h).
#include "tools/engine/console_log.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "core/check.h"

namespace kiln {

std::string LineFolder::feed(const std::string& chunk) {
  std::string done;
  for (char c : chunk) {
    if (escape_ == 1) {  // ESC x: a CSI sequence when x is '[', else a two-byte sequence
      escape_ = c == '[' ? 2 : 0;
      continue;
    }
    if (escape_ == 2) {
      if (c >= 0x40 && c <= 0x7e) escape_ = 0;  // the final byte
      continue;
    }
    if (c == '\033') {
      escape_ = 1;
      continue;
    }
    if (after_cr_ && c != '\n') line_.clear();  // a redraw: the text before the '\r' is gone
    after_cr_ = false;
    if (c == '\r') {
      after_cr_ = true;
    } else if (c == '\n') {
      done += line_ + "\n";
      line_.clear();
    } else {
      line_ += c;
    }
  }
  return done;
}

std::string LineFolder::finish() {
  std::string rest = line_.empty() ? "" : line_ + "\n";
  line_.clear();
  after_cr_ = false;
  escape_ = 0;
  return rest;
}

namespace {

constexpr size_t kMaxEarly = 8u << 20;  // bytes kept in memory until the log is attached

// Writes all of buf to fd, as far as it takes it (retrying interrupted and partial writes).
void write_all(int fd, const char* buf, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t w = ::write(fd, buf + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

std::atomic<int> g_log_fd{-1};  // the attached log's descriptor, for console_log_fd()

// The one active capture of this process.
struct Capture {
  int saved[2] = {-1, -1};            // the original stdout, stderr
  int pipes[2][2] = {{-1, -1}, {-1, -1}};  // [stream][read, write]
  int stop[2] = {-1, -1};             // written once to stop the reader
  bool tty = false;
  std::mutex mu;                      // guards what follows
  LineFolder folders[2];
  std::string early;                  // complete lines captured before the log was attached
  bool early_cut = false;
  int log = -1;                       // the attached train.log (O_APPEND), or -1
  std::thread reader;
  std::string note;

  void to_log(const std::string& lines) {  // with mu held
    if (lines.empty()) return;
    if (log >= 0) {
      write_all(log, lines.data(), lines.size());
    } else if (early.size() + lines.size() <= kMaxEarly) {
      early += lines;
    } else {
      early_cut = true;
    }
  }

  // One chunk of stream s: to the original descriptor as it came, to the log as final lines.
  void take(int s, const char* buf, size_t n) {
    write_all(saved[s], buf, n);  // the terminal may go away: the log still gets it
    std::lock_guard<std::mutex> lk(mu);
    to_log(folders[s].feed(std::string(buf, n)));
  }

  // Reads both pipes until stopped, then what is left in them.
  void run() {
    char buf[65536];
    for (;;) {
      pollfd fds[3] = {{pipes[0][0], POLLIN, 0}, {pipes[1][0], POLLIN, 0}, {stop[0], POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int s = 0; s < 2; ++s)
        if (fds[s].revents & POLLIN) {
          ssize_t n = ::read(pipes[s][0], buf, sizeof buf);
          if (n > 0) take(s, buf, static_cast<size_t>(n));
        }
      if (fds[2].revents) break;
    }
    for (int s = 0; s < 2; ++s) {  // the rest: every write made before the stop is in the pipe
      ::fcntl(pipes[s][0], F_SETFL, ::fcntl(pipes[s][0], F_GETFL) | O_NONBLOCK);
      for (ssize_t n; (n = ::read(pipes[s][0], buf, sizeof buf)) > 0;) take(s, buf, static_cast<size_t>(n));
    }
  }
};

std::mutex g_mu;
Capture* g_capture = nullptr;

void flush_stdio() {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
}

}  // namespace

ConsoleCapture::ConsoleCapture() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_capture) return;  // one at a time: the outer one captures
  auto c = std::make_unique<Capture>();
  c->tty = isatty(STDOUT_FILENO) == 1;
  if (::pipe(c->pipes[0]) != 0 || ::pipe(c->pipes[1]) != 0 || ::pipe(c->stop) != 0) {
    for (int* p : {c->pipes[0], c->pipes[1], c->stop})
      for (int k = 0; k < 2; ++k)
        if (p[k] >= 0) ::close(p[k]);
    return;  // no pipes: the run goes on without train.log
  }
  for (int* p : {c->pipes[0], c->pipes[1], c->stop})
    for (int k = 0; k < 2; ++k) ::fcntl(p[k], F_SETFD, FD_CLOEXEC);
  flush_stdio();
  c->saved[0] = ::dup(STDOUT_FILENO);
  c->saved[1] = ::dup(STDERR_FILENO);
  ::dup2(c->pipes[0][1], STDOUT_FILENO);
  ::dup2(c->pipes[1][1], STDERR_FILENO);
  // stdio decides its buffering by isatty on first use: a terminal's lines stay line by line.
  if (c->tty) std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  Capture* raw = c.get();
  c->reader = std::thread([raw] { raw->run(); });
  g_capture = c.release();
  active_ = true;
}

ConsoleCapture::~ConsoleCapture() {
  if (!active_) return;
  std::lock_guard<std::mutex> lk(g_mu);
  Capture* c = g_capture;
  flush_stdio();
  ::dup2(c->saved[0], STDOUT_FILENO);
  ::dup2(c->saved[1], STDERR_FILENO);
  const char one = 1;
  while (::write(c->stop[1], &one, 1) < 0 && errno == EINTR) {
  }
  c->reader.join();
  {
    std::lock_guard<std::mutex> lk2(c->mu);
    c->to_log(c->folders[0].finish() + c->folders[1].finish());
    if (!c->note.empty()) c->to_log(c->note + "\n");
  }
  for (int* p : {c->pipes[0], c->pipes[1], c->stop, c->saved})
    for (int k = 0; k < 2; ++k) ::close(p[k]);
  g_log_fd.store(-1);
  if (c->log >= 0) ::close(c->log);
  delete c;
  g_capture = nullptr;
}

void ConsoleCapture::note(const std::string& line) {
  if (!active_) return;
  std::lock_guard<std::mutex> lk(g_capture->mu);
  g_capture->note = line;
}

void attach_console_log(const std::string& path, const std::string& header) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_capture) return;
  flush_stdio();
  std::lock_guard<std::mutex> lk2(g_capture->mu);
  Capture& c = *g_capture;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  KILN_CHECK(fd >= 0, "cannot write the console log '", path, "': ", std::strerror(errno));
  g_log_fd.store(-1);
  if (c.log >= 0) ::close(c.log);
  c.log = fd;
  std::string first = header.empty() ? "" : header + "\n";
  if (c.early_cut) first += "[kiln: the first lines of this run's console were too long to keep]\n";
  first += c.early;
  write_all(c.log, first.data(), first.size());
  c.early.clear();
  g_log_fd.store(fd);
}

int console_log_fd() { return g_log_fd.load(); }

bool console_is_tty() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_capture ? g_capture->tty : isatty(STDOUT_FILENO) == 1;
}

}  // namespace kiln
