// Time the host spends blocked in calls that wait for a device (on CUDA: cudaStreamSynchronize,
// cudaEventSynchronize, blocking device-to-host copies, NCCL waits): the backend wraps each such
// call in a HostWaitTimer, which adds its duration to a process-wide counter (all threads). A
// training step should block only at logging intervals; `kiln bench train` reports the share of
// step time spent here. Plain C++ (no CUDA types), compiled in every build: without CUDA nothing
// ever blocks on a device and the counter stays 0. Tests: tests/cli/bench_test.cpp.
#pragma once
#include <chrono>
#include <cstdint>

namespace kiln {

struct HostWaitStats {
  double seconds = 0;  // total time blocked
  int64_t calls = 0;   // number of blocking calls
};
HostWaitStats host_wait_stats();

class HostWaitTimer {
 public:
  HostWaitTimer() : start_(std::chrono::steady_clock::now()) {}
  ~HostWaitTimer();
  HostWaitTimer(const HostWaitTimer&) = delete;
  HostWaitTimer& operator=(const HostWaitTimer&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln
