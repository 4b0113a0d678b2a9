#include "core/allocator.h"

#include <cstdlib>
#include <memory>

#include "core/check.h"

namespace kiln {

KILN_DEFINE_KERNEL_SLOT(allocator);

CachingAllocator::CachingAllocator(Device device, RawAlloc alloc, RawFree free)
    : device_(device), raw_alloc_(std::move(alloc)), raw_free_(std::move(free)) {}

CachingAllocator::~CachingAllocator() {
  // NOTE: static destruction order: leave blocks to the OS rather than touch a torn-down driver.
}

// Size classes: multiples of 512 B up to 64 KiB, then four classes per power of two (<= 25% waste).
size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= 65536) return (bytes + 511) & ~size_t(511);
  size_t p = 1;
  while (p * 2 < bytes) p *= 2;  // p < bytes <= 2p
  size_t step = p / 4;
  return (bytes + step - 1) / step * step;
}

static std::string mib(size_t b) { return std::to_string(b / (1024.0 * 1024.0)).substr(0, 8) + " MiB"; }

void* CachingAllocator::allocate(size_t bytes) {
  size_t sz = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (stats_.limit && stats_.allocated + sz > stats_.limit) {
    throw OutOfMemoryError("out of memory on " + device_.str() + ": asked for " + std::to_string(bytes) +
                           " bytes with " + mib(stats_.allocated) + " allocated, " + mib(stats_.reserved) +
                           " reserved, limit " + mib(stats_.limit));
  }
  void* p = nullptr;
  if (active_pool_) {  // a capture: the pool's own blocks first
    auto& pool = pools_[active_pool_];
    auto pit = pool.find(sz);
    if (pit != pool.end()) {
      p = pit->second;
      pool.erase(pit);
      stats_.allocated += sz;
      if (stats_.allocated > stats_.peak) stats_.peak = stats_.allocated;
      return p;
    }
  }
  auto it = free_.find(sz);
  if (it != free_.end()) {
    p = it->second;
    free_.erase(it);
  } else {
    p = raw_alloc_(sz);
    if (!p && !active_pool_) {  // give the cache back and try once more before failing (never in a capture)
      release_cached_locked();
      p = raw_alloc_(sz);
    }
    if (!p) {
      throw OutOfMemoryError("out of memory on " + device_.str() + ": asked for " + std::to_string(bytes) +
                             " bytes with " + mib(stats_.allocated) + " allocated, " + mib(stats_.reserved) +
                             " reserved");
    }
    stats_.reserved += sz;
    ++stats_.num_system_allocs;
  }
  if (active_pool_) owner_[p] = active_pool_;
  stats_.allocated += sz;
  if (stats_.allocated > stats_.peak) stats_.peak = stats_.allocated;
  return p;
}

void CachingAllocator::deallocate(void* p, size_t bytes) {
  if (!p) return;
  size_t sz = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.allocated -= sz;
  take_locked(p, sz);
}

void CachingAllocator::take_locked(void* p, size_t sz) {
  auto o = owner_.find(p);
  if (o != owner_.end()) {
    auto pool = pools_.find(o->second);
    if (pool != pools_.end()) {  // a live pool's block goes back to it
      pool->second.emplace(sz, p);
      return;
    }
    owner_.erase(o);  // its pool was released: an ordinary block again
  }
  if (active_pool_) {  // freed during a capture: the graph may still use it
    owner_[p] = active_pool_;
    pools_[active_pool_].emplace(sz, p);
    return;
  }
  free_.emplace(sz, p);
}

int CachingAllocator::begin_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_CHECK(!active_pool_, "allocator on ", device_.str(), ": private pool ", active_pool_,
             " is still active (one capture at a time)");
  active_pool_ = next_pool_++;
  pools_[active_pool_];
  return active_pool_;
}

void CachingAllocator::end_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  active_pool_ = 0;
}

void CachingAllocator::release_pool(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (active_pool_ == id) active_pool_ = 0;
  auto pool = pools_.find(id);
  if (pool == pools_.end()) return;
  for (auto& [sz, p] : pool->second) {
    owner_.erase(p);
    free_.emplace(sz, p);
  }
  pools_.erase(pool);  // live blocks still tagged `id` join the cache when freed (take_locked)
}

int CachingAllocator::active_pool() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_pool_;
}

size_t CachingAllocator::pool_free_bytes(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto pool = pools_.find(id);
  size_t n = 0;
  if (pool != pools_.end())
    for (const auto& [sz, p] : pool->second) n += sz;
  return n;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.allocated;
}

void CachingAllocator::set_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.limit = bytes;
}

void CachingAllocator::release_cached_locked() {
  for (auto& [sz, p] : free_) {
    raw_free_(p);
    stats_.reserved -= sz;
  }
  free_.clear();
}

CachingAllocator& allocator_for(Device d) {
  if (d.is_cpu()) {
    // 64-byte alignment: AVX-512 loads and oneDNN's preferred alignment.
    static CachingAllocator* cpu = new CachingAllocator(
        Device::cpu(), [](size_t n) { return std::aligned_alloc(64, (n + 63) & ~size_t(63)); },
        [](void* p) { std::free(p); });
    return *cpu;
  }
  check_available(d, "allocator");
  return allocator_kernel.get(d)(d.index);  // a GPU's: core/cuda/allocator_cuda.cu
}

}  // namespace kiln
