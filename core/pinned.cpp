// Pinned host memory in a build without CUDA: ordinary CPU tensors (nothing to pin for, nothing to
// wait for). The CUDA build's version is core/cuda/pinned_cuda.cu.
#ifndef KILN_WITH_CUDA
#include "core/pinned.h"

namespace kiln {

Tensor empty_pinned(const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype, Device::cpu()); }
bool is_pinned(const Tensor&) { return false; }
void wait_host_copies(const Tensor&) {}

}  // namespace kiln
#endif
