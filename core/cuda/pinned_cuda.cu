// Pinned host memory (cudaHostAlloc, portable to every device) with a registry of the blocks, so the
// copy code can tell a pinned source (asynchronous copy) from pageable memory and record, per block,
// an event after the last copy that reads it. These are the CUDA kernels of core/pinned.h's slots
// (pinned_alloc, pinned_free, is_pinned, wait_host_copies; registered in kernels_cuda.cu); the
// tensors over the blocks are made in core/pinned.cpp. Tests: tests/gpu/copy_test.cpp.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/host_wait.h"
#include "core/cuda/runtime.h"

namespace kiln {
namespace {

struct PinnedBlock {
  size_t bytes = 0;
  std::vector<std::pair<int, cudaEvent_t>> events;  // per device: after the last copy reading the block
};

std::mutex& registry_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<uintptr_t, PinnedBlock>& registry() {
  static auto* r = new std::map<uintptr_t, PinnedBlock>;
  return *r;
}

// The block holding address p, or end(). Caller holds the lock.
std::map<uintptr_t, PinnedBlock>::iterator find_block(const void* p) {
  auto& r = registry();
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = r.upper_bound(a);
  if (it == r.begin()) return r.end();
  --it;
  return a < it->first + std::max<size_t>(it->second.bytes, 1) ? it : r.end();
}

std::vector<cudaEvent_t> events_of(const void* p) {
  std::lock_guard<std::mutex> lock(registry_mu());
  std::vector<cudaEvent_t> out;
  auto it = find_block(p);
  if (it != registry().end())
    for (auto& [dev, ev] : it->second.events) out.push_back(ev);
  return out;
}

}  // namespace

namespace cuda {

// Storage deleter: no exceptions (runs in destructors); waits for readers, then frees.
void pinned_free(void* p) {
  std::vector<std::pair<int, cudaEvent_t>> events;
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    auto it = registry().find(reinterpret_cast<uintptr_t>(p));
    if (it != registry().end()) {
      events = std::move(it->second.events);
      registry().erase(it);
    }
  }
  for (auto& [dev, ev] : events) {
    cudaEventSynchronize(ev);
    cudaEventDestroy(ev);
  }
  cudaFreeHost(p);
  cudaGetLastError();
}

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  CUDA_CHECK(e);
  std::lock_guard<std::mutex> lock(registry_mu());
  registry()[reinterpret_cast<uintptr_t>(p)].bytes = bytes;
  return p;
}

void wait_host_copies(const void* p) {
  for (cudaEvent_t ev : events_of(p)) {
    HostWaitTimer wait;
    CUDA_CHECK(cudaEventSynchronize(ev));
  }
}

bool is_pinned_ptr(const void* p) {
  std::lock_guard<std::mutex> lock(registry_mu());
  return find_block(p) != registry().end();
}

void record_pinned_read(const void* p, int device) {
  cudaStream_t s = stream_of(device);
  std::lock_guard<std::mutex> lock(registry_mu());
  auto it = find_block(p);
  if (it == registry().end()) return;
  cudaEvent_t ev = nullptr;
  for (auto& [dev, e] : it->second.events)
    if (dev == device) ev = e;
  DeviceGuard g(device);
  if (!ev) {
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    it->second.events.emplace_back(device, ev);
  }
  CUDA_CHECK(cudaEventRecord(ev, s));
}

}  // namespace cuda
}  // namespace kiln
