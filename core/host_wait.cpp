// The host-wait counter, see host_wait.h.
#include "core/host_wait.h"

#include <atomic>

namespace kiln {
namespace {
std::atomic<int64_t> g_nanos{0};
std::atomic<int64_t> g_calls{0};
}  // namespace

HostWaitTimer::~HostWaitTimer() {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  g_nanos.fetch_add(static_cast<int64_t>(ns), std::memory_order_relaxed);
  g_calls.fetch_add(1, std::memory_order_relaxed);
}

HostWaitStats host_wait_stats() {
  return {static_cast<double>(g_nanos.load(std::memory_order_relaxed)) * 1e-9, g_calls.load(std::memory_order_relaxed)};
}

}  // namespace kiln
