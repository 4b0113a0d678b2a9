// The run folder's writer lock (see run_lock.h).
#include "tools/engine/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>

#include "core/check.h"

namespace kiln {

std::string process_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw)
    if (c == '\0') c = ' ';
  return raw;
}

std::string local_time_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %z", &tm);
  return buf;
}

namespace {
std::string& resume_prefix() {
  static std::string prefix;
  return prefix;
}
}  // namespace

void set_resume_command(const std::string& command) { resume_prefix() = command; }

std::string resume_command(const std::string& run_dir) {
  return resume_prefix().empty() ? "kiln::train(\"" + run_dir + "\")" : resume_prefix() + " " + run_dir;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

namespace {

std::string lock_path(const std::string& run_dir) { return run_dir + "/.lock"; }

// Replaces the lock file's text by ours (we hold the lock: nobody else writes it).
void record_holder(int fd) {
  const std::string text = "host " + host_name() + ", PID " + std::to_string(::getpid()) + ", since " +
                           local_time_text() + ": " + process_command_line() + "\n";
  if (::ftruncate(fd, 0) != 0) return;  // the record is for messages only: the lock is what counts
  const ssize_t n = ::pwrite(fd, text.data(), text.size(), 0);
  (void)n;
}

}  // namespace

std::string run_lock_holder(const std::string& run_dir) {
  std::ifstream in(lock_path(run_dir));
  std::string line;
  std::getline(in, line);
  return line;
}

RunLock::RunLock(const std::string& run_dir, const std::string& what) {
  const std::string path = lock_path(run_dir);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  KILN_CHECK(fd_ >= 0, what, " ", run_dir, ": cannot open its lock file ", path, ": ", std::strerror(errno),
             " (the run folder must be writable)");
  int rc;
  while ((rc = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc != 0 && (errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS)) {
    std::cerr << "kiln: warning: " << path << ": the filesystem takes no locks (" << std::strerror(errno)
              << "): nothing keeps a second kiln train from writing " << run_dir << " at the same time\n";
    return;
  }
  if (rc != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    KILN_CHECK(err == EWOULDBLOCK, what, " ", run_dir, ": cannot lock ", path, ": ", std::strerror(err));
    const std::string holder = run_lock_holder(run_dir);
    KILN_FAIL(what, " ", run_dir, ": the run folder is being written by another kiln train (",
              holder.empty() ? std::string("its holder is not recorded") : holder,
              "); two writers would interleave its checkpoints and metrics. Wait for it to end, or stop it "
              "(Ctrl-C, or kill -INT with its PID: it saves) and then resume with: ", resume_command(run_dir));
  }
  held_ = true;
  record_holder(fd_);
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (a stale record is harmless)
}

}  // namespace kiln
