// Pinned host memory, device-neutral (see pinned.h): with a visible GPU, tensors over the blocks of
// the GPU backend's pinned_alloc_kernel (core/cuda/pinned_cuda.cu), freed by its pinned_free_kernel;
// without one (or in a build without CUDA), ordinary CPU tensors, nothing to pin for and nothing to
// wait for. Tests: tests/gpu/copy_test.cpp, tests/core/device_functions_test.cpp.
#include "core/pinned.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/device.h"

namespace kiln {

KILN_DEFINE_KERNEL_SLOT(pinned_alloc);
KILN_DEFINE_KERNEL_SLOT(pinned_free);
KILN_DEFINE_KERNEL_SLOT(is_pinned);
KILN_DEFINE_KERNEL_SLOT(wait_host_copies);

namespace {
// The device whose copies pinned memory serves (every GPU: the blocks are portable), or none.
bool pinning(Device* d) {
  if (cuda_device_count() == 0) return false;
  *d = Device::cuda(0);
  return true;
}
}  // namespace

Tensor empty_pinned(const Shape& shape, DType dtype) {
  Device d;
  if (!pinning(&d)) return Tensor::empty(shape, dtype, Device::cpu());
  for (int64_t n : shape) KILN_CHECK(n >= 0, "empty_pinned: negative size in shape ", shape_str(shape));
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  const auto free_block = pinned_free_kernel.get(d, "empty_pinned");
  void* p = pinned_alloc_kernel.get(d, "empty_pinned")(std::max<size_t>(bytes, 1));
  if (p == nullptr)
    throw OutOfMemoryError("out of pinned host memory: cudaHostAlloc of " + std::to_string(bytes) +
                           " bytes failed for a tensor " + shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(p, bytes, Device::cpu(), free_block);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

bool is_pinned(const Tensor& t) {
  Device d;
  if (!t.defined() || !t.device().is_cpu() || !pinning(&d)) return false;
  return is_pinned_kernel.get(d, "is_pinned")(t.impl().storage->data);
}

void wait_host_copies(const Tensor& t) {
  Device d;
  if (!t.defined() || !t.device().is_cpu() || !pinning(&d)) return;
  wait_host_copies_kernel.get(d, "wait_host_copies")(t.impl().storage->data);
}

}  // namespace kiln
