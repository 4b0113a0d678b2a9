#include "tools/engine/progress.h"

#include <cmath>
#include <iostream>

#include "tools/engine/console_log.h"

namespace kiln {

Progress::Progress(std::string phase, int epoch, int epochs, int64_t total, bool tty, int64_t every,
                   double every_seconds)
    : phase_(std::move(phase)), epoch_(epoch), epochs_(epochs), total_(total), tty_(tty),
      every_(every > 0 ? every : std::max<int64_t>(1, total / 10)), every_seconds_(every_seconds),
      last_draw_(std::chrono::steady_clock::now()) {}

bool Progress::stdout_is_tty() { return console_is_tty(); }

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
  auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (drawn_ && step < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    drawn_ = true;
    std::cout << "\r\033[K" << line(step, fields) << std::flush;
  } else if (step < total_ && (every_seconds_ > 0 ? now - last_draw_ >= std::chrono::duration<double>(every_seconds_)
                                                  : step % every_ == 0)) {
    last_draw_ = now;
    std::cout << line(step, fields) << "\n" << std::flush;
  }
}

void Progress::finish(const std::string& fields) {
  if (tty_) std::cout << "\r\033[K";
  std::cout << line(total_, fields) << "\n" << std::flush;
}

void Progress::clear() {
  if (tty_ && drawn_) std::cout << "\r\033[K" << std::flush;
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<long long>(std::llround(s));
  const long long d = t / 86400, h = t / 3600 % 24, m = t / 60 % 60, sec = t % 60;
  char buf[48];
  if (d > 0) std::snprintf(buf, sizeof buf, "%lldd %02lld:%02lld:%02lld", d, h, m, sec);
  else if (h > 0) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", h, m, sec);
  else if (m > 0) std::snprintf(buf, sizeof buf, "%lld:%02lld", m, sec);
  else std::snprintf(buf, sizeof buf, "%llds", sec);
  return buf;
}

double eta_seconds(double elapsed, double done, double total) {
  if (!(done > 0)) return NAN;
  return elapsed / done * std::max(0.0, total - done);
}

std::string time_fields(double epoch_elapsed, int64_t epoch_done, int64_t epoch_total, double run_elapsed,
                        int64_t run_done, int64_t run_total) {
  std::string s = epoch_done >= epoch_total
                      ? "epoch " + format_duration(epoch_elapsed)
                      : format_duration(epoch_elapsed) + " eta " +
                            format_duration(eta_seconds(epoch_elapsed, static_cast<double>(epoch_done),
                                                        static_cast<double>(epoch_total)));
  const int64_t after_epoch = run_total - run_done - std::max<int64_t>(0, epoch_total - epoch_done);
  if (after_epoch > 0)
    s += ", run eta " +
         format_duration(eta_seconds(run_elapsed, static_cast<double>(run_done), static_cast<double>(run_total)));
  return s;
}

}  // namespace kiln
