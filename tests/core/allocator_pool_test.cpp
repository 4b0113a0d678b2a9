// The caching allocator's private pools (core/allocator.h), which keep a captured CUDA graph's memory
// its own (docs/cuda_backend.md, "CUDA graphs"): on an allocator over malloc with counted system calls.
//  - during a pool: blocks freed (whatever their origin) go to the pool and serve the pool's next
//    allocations; cached blocks of the shared cache may join the pool;
//  - after the pool ends: its blocks, freed by anyone, go back to it, never to the shared cache, so no
//    other allocation receives memory the graph replays into;
//  - release_pool: its free blocks, and its live blocks once freed, serve ordinary allocations again;
//  - while a pool is active, a failed system allocation is not retried after giving the cache back
//    (no free during a capture), and a second pool cannot begin.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "core/allocator.h"
#include "core/check.h"

using namespace kiln;

namespace {

// The system memory of the allocator under test. A CachingAllocator leaves its blocks to the process
// at destruction (core/allocator.cpp: static destruction order), so what is still held when the test
// ends is freed here (declared before the allocator, destroyed after it), for LeakSanitizer.
struct Counted {
  int allocs = 0, frees = 0;
  bool fail = false;
  std::set<void*> held;
  ~Counted() {
    for (void* p : held) std::free(p);
  }
  std::unique_ptr<CachingAllocator> make() {
    return std::make_unique<CachingAllocator>(
        Device::cpu(),
        [this](size_t n) -> void* {
          if (fail) return nullptr;
          ++allocs;
          void* p = std::malloc(n);
          held.insert(p);
          return p;
        },
        [this](void* p) {
          ++frees;
          held.erase(p);
          std::free(p);
        });
  }
};

}  // namespace

TEST(AllocatorPool, BlocksOfAPoolNeverServeOrdinaryAllocationsUntilReleased) {
  Counted c;
  auto a = c.make();
  void* before = a->allocate(1000);  // an ordinary block, live when the capture starts
  const int pool = a->begin_pool();
  EXPECT_EQ(a->active_pool(), pool);
  void* t = a->allocate(1000);  // a temporary of the capture
  a->deallocate(t, 1000);
  void* u = a->allocate(1000);  // served by the pool: the temporary's block again
  EXPECT_EQ(u, t);
  a->deallocate(before, 1000);  // freed during the capture: the graph may still read it
  a->deallocate(u, 1000);
  void* out = a->allocate(1000);  // an output that outlives the capture (a gradient)
  a->end_pool();
  EXPECT_EQ(a->active_pool(), 0);
  EXPECT_EQ(a->pool_free_bytes(pool), CachingAllocator::round_size(1000));
  // Ordinary allocations after the capture get fresh memory: none of the pool's blocks.
  std::set<void*> pool_blocks = {before, t, out};
  void* e1 = a->allocate(1000);
  void* e2 = a->allocate(1000);
  EXPECT_EQ(pool_blocks.count(e1), 0u);
  EXPECT_EQ(pool_blocks.count(e2), 0u);
  // The pool's output freed by eager code (zero_grad) goes back to the pool, not to the cache.
  a->deallocate(out, 1000);
  EXPECT_EQ(a->pool_free_bytes(pool), 2 * CachingAllocator::round_size(1000));
  a->deallocate(e1, 1000);
  void* e3 = a->allocate(1000);
  EXPECT_EQ(e3, e1);  // the shared cache serves its own block
  // Released: the pool's free blocks serve ordinary allocations again, without the system.
  a->release_pool(pool);
  EXPECT_EQ(a->pool_free_bytes(pool), 0u);
  const int allocs = c.allocs;
  std::set<void*> got = {a->allocate(1000), a->allocate(1000)};
  EXPECT_EQ(c.allocs, allocs);
  for (void* p : got) EXPECT_EQ(pool_blocks.count(p), 1u);
  EXPECT_EQ(a->stats().allocated, 4 * CachingAllocator::round_size(1000));
}

TEST(AllocatorPool, ALiveBlockOfAReleasedPoolJoinsTheCacheWhenFreed) {
  Counted c;
  auto a = c.make();
  const int pool = a->begin_pool();
  void* out = a->allocate(4096);
  a->end_pool();
  a->release_pool(pool);
  a->deallocate(out, 4096);
  EXPECT_EQ(a->allocate(4096), out);
}

TEST(AllocatorPool, ABlockOfAReleasedPoolFreedDuringAnotherCaptureJoinsThatPool) {
  Counted c;
  auto a = c.make();
  const int first = a->begin_pool();
  void* grad = a->allocate(4096);  // the first graph's gradient, still a parameter's .grad
  a->end_pool();
  a->release_pool(first);  // a new shape replaces the graph
  const int second = a->begin_pool();
  a->deallocate(grad, 4096);  // the new capture's zero_grad drops it
  a->end_pool();
  EXPECT_EQ(a->pool_free_bytes(second), CachingAllocator::round_size(4096));
  EXPECT_NE(a->allocate(4096), grad);
}

TEST(AllocatorPool, ACaptureTakesCachedBlocksAndNeverGivesTheCacheBack) {
  Counted c;
  auto a = c.make();
  void* cached = a->allocate(2048);
  a->deallocate(cached, 2048);
  const int pool = a->begin_pool();
  const int allocs = c.allocs;
  EXPECT_EQ(a->allocate(2048), cached);  // no system allocation during the capture where the cache has one
  EXPECT_EQ(c.allocs, allocs);
  EXPECT_THROW(a->begin_pool(), Error);  // one capture at a time
  void* other = a->allocate(1 << 20);
  a->deallocate(other, 1 << 20);
  c.fail = true;  // out of memory during the capture: fails without freeing the cache
  EXPECT_THROW(a->allocate(8 << 20), OutOfMemoryError);
  EXPECT_EQ(c.frees, 0);
  a->end_pool();
  a->release_pool(pool);
  c.fail = false;
}
