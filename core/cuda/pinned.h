// Page-locked (pinned) host memory for the data loader's batch buffers. A copy from a pinned CPU
// tensor to a GPU returns before the transfer ends (the loader keeps decoding meanwhile), so a
// buffer must not be refilled until wait_host_copies() says the transfers that read it are done.
// Without CUDA (or without a visible GPU) these are ordinary CPU tensors and the wait is a no-op,
// so callers need no #ifdef. Tests: tests/gpu/copy_test.cpp.
#pragma once
#include "core/tensor.h"

namespace kiln {

// A contiguous CPU tensor in pinned memory when a CUDA GPU is visible, else in ordinary memory.
Tensor empty_pinned(const Shape& shape, DType dtype);
// True when t's storage is pinned host memory from empty_pinned().
bool is_pinned(const Tensor& t);
// Blocks until every asynchronous copy that reads t's pinned storage has finished.
void wait_host_copies(const Tensor& t);

}  // namespace kiln
