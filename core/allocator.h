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

  // --- private pools (a captured CUDA graph's memory: docs/cuda_backend.md, "CUDA graphs") ---
  // A captured graph replays kernels with the addresses they had at capture, so no block it touched
  // may be handed to other code while the graph lives. Between begin_pool() and end_pool():
  // allocate() serves from the pool's own free blocks, else takes a cached block (or a new one) into
  // the pool; deallocate() puts every block into the pool, whatever its origin (a block allocated
  // before and freed during the capture may still be read by the graph). After end_pool(), blocks of
  // the pool freed by anyone return to the pool, never to the shared cache, until release_pool(id)
  // (the graph is gone): then its free blocks and, as they are freed, its live ones join the cache.
  // While a pool is active the cache is never given back to the system (no free during a capture).
  // One pool at a time is active; `allocated`/`reserved` count pool blocks like any other.
  int begin_pool();
  void end_pool();
  void release_pool(int id);
  int active_pool() const;          // 0: none
  size_t pool_free_bytes(int id) const;  // cached free bytes held by pool `id` (tests)

 private:
  void release_cached_locked();
  void take_locked(void* p, size_t sz);  // deallocate's body
  Device device_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // rounded size -> block
  MemoryStats stats_;
  int active_pool_ = 0, next_pool_ = 1;
  std::map<int, std::multimap<size_t, void*>> pools_;  // live pools: their free blocks
  std::map<void*, int> owner_;                         // block -> pool (live or released) it belongs to
};

CachingAllocator& allocator_for(Device d);
inline MemoryStats memory_stats(Device d = Device::cpu()) { return allocator_for(d).stats(); }

// The caching allocator of device index `index` of a kind other than the CPU (a GPU's:
// core/cuda/allocator_cuda.cu); throws when the device does not exist. The CPU's is allocator_for's.
extern KernelSlot<CachingAllocator& (*)(int index)> allocator_kernel;

}  // namespace kiln
