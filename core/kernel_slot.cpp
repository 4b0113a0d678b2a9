// Kernel slots' registration and errors (see kernel_slot.h), and the one place outside core/cuda/
// where the build's CUDA switch is read: it decides whether cuda::register_kernels() exists, and in a
// build without CUDA it answers core/device.h's cuda_compiled() and cuda_device_count() (with CUDA,
// core/cuda/runtime.cu answers them). Tests: tests/core/silu_test.cpp (KernelSlot.*).
#include "core/kernel_slot.h"

#include <mutex>

#include "core/check.h"
#include "core/device.h"

namespace kiln {

#ifndef KILN_WITH_CUDA
int cuda_device_count() { return 0; }
bool cuda_compiled() { return false; }
#endif

void ensure_kernels_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    cpu::register_kernels();
#ifdef KILN_WITH_CUDA
    cuda::register_kernels();
#endif
  });
}

namespace detail {

int kernel_slot_index(DeviceType t) { return t == DeviceType::CPU ? 0 : 1; }

int kernel_slot_index(const Device& d, const char* op) {
  check_available(d, op);
  return kernel_slot_index(d.type);
}

void no_kernel(const char* op, const Device& d) { KILN_FAIL(op, ": no ", device_type_name(d.type), " kernel"); }

}  // namespace detail
}  // namespace kiln
