// Page-locked (pinned) host memory for the data loader's batch buffers. A copy from a pinned CPU
// tensor to a GPU returns before the transfer ends (the loader keeps decoding meanwhile), so a
// buffer must not be refilled until wait_host_copies() says the transfers that read it are done.
// Without CUDA (or without a visible GPU) these are ordinary CPU tensors and the wait is a no-op,
// so callers need no #ifdef. The device-neutral part is here (core/pinned.cpp,
// core/pinned_staging.cpp); the page-locked blocks and the waits on the copies that read them are
// kernel slots that the CUDA backend fills (core/cuda/pinned_cuda.cu). Tests: tests/gpu/copy_test.cpp,
// tests/core/device_functions_test.cpp (without a GPU).
#pragma once
#include <cstddef>
#include <vector>

#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln {

// A contiguous CPU tensor in pinned memory when a CUDA GPU is visible, else in ordinary memory.
Tensor empty_pinned(const Shape& shape, DType dtype);
// True when t's storage is pinned host memory from empty_pinned().
bool is_pinned(const Tensor& t);
// Blocks until every asynchronous copy that reads t's pinned storage has finished.
void wait_host_copies(const Tensor& t);

// Pinned buffers for tensors the host makes anew every step (the trainer's MixUp/CutMix batch): a
// copy to a GPU from ordinary memory waits for the device (core/cuda/copy_cuda.cu), one from these
// returns at once. Each role (images, targets, labels) has `depth` buffers used in turn; before one
// is handed out again, wait_host_copies() lets the upload that read it finish (that of `depth`
// steps ago: done, unless the host runs that far ahead of the GPU). Without a visible GPU buffer()
// gives ordinary tensors and stage() returns its argument. Tests: tests/gpu/copy_test.cpp.
class PinnedStaging {
 public:
  explicit PinnedStaging(int depth = 2);
  // The next buffer of `role`, shaped (shape, dtype), contiguous, free to fill.
  Tensor buffer(const Shape& shape, DType dtype, size_t role);
  // A copy of t in the next buffer of `role`; t itself when it is pinned already or no GPU is visible.
  Tensor stage(const Tensor& t, size_t role);

 private:
  int depth_;
  std::vector<std::vector<Tensor>> slots_;  // [role][depth]
  std::vector<size_t> next_;                // [role]: the slot handed out next
};

// --- the kernel slots behind these, filled by a device whose copies from page-locked host memory
// are asynchronous (CUDA; the CPU fills none). Pinned blocks serve every device of that kind.
// A page-locked block of `bytes` (>= 1) host bytes, registered so the device's copies can tell it
// from pageable memory; nullptr when the host is out of page-locked memory.
extern KernelSlot<void* (*)(size_t bytes)> pinned_alloc_kernel;
// Waits for the copies that read the block, then frees it. Never throws (runs in destructors).
extern KernelSlot<void (*)(void* block)> pinned_free_kernel;
// Whether p lies in a block from pinned_alloc_kernel that is not freed yet.
extern KernelSlot<bool (*)(const void* p)> is_pinned_kernel;
// Blocks until every asynchronous copy that reads the block holding p has finished (none: returns).
extern KernelSlot<void (*)(const void* p)> wait_host_copies_kernel;

}  // namespace kiln
