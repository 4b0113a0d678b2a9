// Caching allocator, one per device, with the counters that AutoBatch, gradient checkpointing and
// the leak tests read. Blocks are rounded to size classes and kept in a free list on release, so a
// training step after the first allocates nothing from the system.
//
//   allocated: bytes in live blocks (rounded sizes)    reserved: allocated + cached free blocks
//   peak:      highest `allocated` since reset_peak()  limit:    optional cap on `allocated`
//                                                                (simulates a smaller device)
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>

#include "core/device.h"
#include "core/kernel_slot.h"

namespace kiln {

struct MemoryStats {
  size_t allocated = 0;
  size_t reserved = 0;
  size_t peak = 0;
  size_t limit = 0;  // 0 = none
  size_t num_system_allocs = 0;
};

class CachingAllocator {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // returns nullptr when out of memory
  using RawFree = std::function<void(void*)>;
  CachingAllocator(Device device, RawAlloc alloc, RawFree free);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Throws OutOfMemoryError naming the request and the counters when the memory is not there.
  void* allocate(size_t bytes);
  void deallocate(void* p, size_t bytes);

  MemoryStats stats() const;
  void reset_peak();
  // Caps `allocated`; 0 removes the cap. Allocations over it throw OutOfMemoryError.
  void set_limit(size_t bytes);

  static size_t round_size(size_t bytes);

 private:
  void release_cached_locked();
  Device device_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // rounded size -> block
  MemoryStats stats_;
};

CachingAllocator& allocator_for(Device d);
inline MemoryStats memory_stats(Device d = Device::cpu()) { return allocator_for(d).stats(); }

// The caching allocator of device index `index` of a kind other than the CPU (a GPU's:
// core/cuda/allocator_cuda.cu); throws when the device does not exist. The CPU's is allocator_for's.
extern KernelSlot<CachingAllocator& (*)(int index)> allocator_kernel;

}  // namespace kiln
