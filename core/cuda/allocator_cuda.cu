// The caching allocator of each GPU: core/allocator.h's CachingAllocator over cudaMalloc/cudaFree.
// Plain device memory only (never managed memory: oversubscribing it can hang the GPU). A failed
// cudaMalloc returns nullptr, so the generic allocator frees its cache, retries once, and then
// throws OutOfMemoryError naming the request and the counters.
// NOTE: blocks are reused without stream events; that is safe because each device queues all its
// work on one stream (see runtime.h). Tests: tests/gpu/runtime_test.cpp.
#include <memory>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/runtime.h"

namespace kiln {

CachingAllocator& cuda_allocator(int index) {
  int n = cuda_device_count();
  KILN_CHECK(index >= 0 && index < n, "device cuda:", index, " is not available (", n, " CUDA device(s) visible)");
  static std::mutex mu;
  // Never destroyed: cached blocks go with the process (see CachingAllocator's destructor).
  static auto* allocators = new std::vector<std::unique_ptr<CachingAllocator>>(static_cast<size_t>(n));
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*allocators)[static_cast<size_t>(index)];
  if (!slot) {
    auto raw_alloc = [index](size_t bytes) -> void* {
      cuda::DeviceGuard g(index);
      void* p = nullptr;
      cudaError_t e = cudaMalloc(&p, bytes);
      if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky: clear it so the next call starts clean
        return nullptr;
      }
      CUDA_CHECK(e);
      return p;
    };
    auto raw_free = [index](void* p) {
      cuda::DeviceGuard g(index);
      CUDA_CHECK(cudaFree(p));  // synchronises the device: queued kernels may still use the block
    };
    slot = std::make_unique<CachingAllocator>(Device::cuda(index), raw_alloc, raw_free);
  }
  return *slot;
}

}  // namespace kiln
