// Pinned host memory (cudaHostAlloc, portable to every device) with a registry of the blocks, so the
// copy code can tell a pinned source (asynchronous copy) from pageable memory and record, per block,
// an event after the last copy that reads it. See pinned.h. Tests: tests/gpu/copy_test.cpp.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/host_wait.h"
#include "core/pinned.h"
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

// Storage deleter: no exceptions (runs in destructors); waits for readers, then frees.
void release_pinned(void* p) {
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

}  // namespace

Tensor empty_pinned(const Shape& shape, DType dtype) {
  if (cuda_device_count() == 0) return Tensor::empty(shape, dtype, Device::cpu());
  for (int64_t d : shape) KILN_CHECK(d >= 0, "empty_pinned: negative size in shape ", shape_str(shape));
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* p = nullptr;
  cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw OutOfMemoryError("out of pinned host memory: cudaHostAlloc of " + std::to_string(bytes) +
                           " bytes failed for a tensor " + shape_str(shape));
  }
  CUDA_CHECK(e);
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    registry()[reinterpret_cast<uintptr_t>(p)].bytes = bytes;
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(p, bytes, Device::cpu(), release_pinned);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

bool is_pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu()) return false;
  return cuda::is_pinned_ptr(t.impl().storage->data);
}

void wait_host_copies(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu()) return;
  for (cudaEvent_t ev : events_of(t.impl().storage->data)) {
    HostWaitTimer wait;
    CUDA_CHECK(cudaEventSynchronize(ev));
  }
}

namespace cuda {

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
