#include "tools/engine/progress.h"

#include <unistd.h>

#include <iostream>

namespace kiln {

Progress::Progress(std::string phase, int epoch, int epochs, int64_t total, bool tty, int64_t every)
    : phase_(std::move(phase)), epoch_(epoch), epochs_(epochs), total_(total), tty_(tty),
      every_(every > 0 ? every : std::max<int64_t>(1, total / 10)) {}

bool Progress::stdout_is_tty() { return isatty(STDOUT_FILENO) == 1; }

std::string Progress::line(int64_t step, const std::string& fields) const {
  std::string s = phase_ + " " + std::to_string(epoch_) + "/" + std::to_string(epochs_) + " ";
  if (tty_) {
    const int width = 20;
    int filled = total_ > 0 ? static_cast<int>(width * step / total_) : width;
    s += "[" + std::string(filled, '#') + std::string(width - filled, '-') + "] ";
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%5lld/%lld  ", static_cast<long long>(step), static_cast<long long>(total_));
  return s + buf + fields;
}

void Progress::update(int64_t step, const std::string& fields) {
  if (tty_) {
    auto now = std::chrono::steady_clock::now();
    if (step < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::cout << "\r\033[K" << line(step, fields) << std::flush;
  } else if (step % every_ == 0 && step < total_) {
    std::cout << line(step, fields) << "\n" << std::flush;
  }
}

void Progress::finish(const std::string& fields) {
  if (tty_) std::cout << "\r\033[K";
  std::cout << line(total_, fields) << "\n" << std::flush;
}

}  // namespace kiln
