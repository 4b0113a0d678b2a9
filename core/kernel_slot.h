// A kernel slot: one function pointer per device type for one kernel, declared in its op's header
// and filled by each device's explicit registration function (issue #33; PyTorch's DECLARE_DISPATCH
// without static self-registration, which a static library silently drops):
//
//   core/ops/silu.h              extern KernelSlot<Tensor (*)(const Tensor& x)> silu_forward_kernel;
//   core/ops/silu.cpp            KILN_DEFINE_KERNEL_SLOT(silu_forward);   (namespace kiln)
//                                ... silu_forward_kernel.get(d, "silu")(x.detach()) ...
//   core/cpu/kernels_cpu.cpp     silu_forward_kernel.set(DeviceType::CPU, silu_forward);   (cpu::register_kernels)
//   core/cuda/kernels_cuda.cu    silu_forward_kernel.set(DeviceType::CUDA, silu_forward);  (cuda::register_kernels)
//
// get() registers every device's kernels on its first call (ensure_kernels_registered, once per
// process), then returns the pointer of the device's type, or throws "<op>: no <device> kernel": a
// device that lacks a kernel never falls back silently to another. A GPU in a build without CUDA
// throws check_available's error (core/device.h). Slots are constant-initialised (constexpr
// constructor), so an op may use one from any static initialiser. docs/adding_an_op.md is the guide.
// Tests: tests/core/silu_test.cpp (KernelSlot.*), tests/core/device_functions_test.cpp.
#pragma once

namespace kiln {

struct Device;
enum class DeviceType;

// Calls cpu::register_kernels() and, in a CUDA build, cuda::register_kernels(), exactly once per
// process (std::call_once); every KernelSlot::get/find calls it first (core/kernel_slot.cpp).
void ensure_kernels_registered();

namespace cpu {
void register_kernels();  // core/cpu/kernels_cpu.cpp: one line per CPU kernel
}
namespace cuda {
void register_kernels();  // core/cuda/kernels_cuda.cu: one line per CUDA kernel (CUDA builds only)
}

namespace detail {
// The slot index of d's type (check_available(d, op) first), and the error of a missing kernel.
int kernel_slot_index(const Device& d, const char* op);
int kernel_slot_index(DeviceType t);
[[noreturn]] void no_kernel(const char* op, const Device& d);
}  // namespace detail

template <typename Fn>
class KernelSlot {
 public:
  constexpr explicit KernelSlot(const char* name) : name_(name) {}
  KernelSlot(const KernelSlot&) = delete;
  KernelSlot& operator=(const KernelSlot&) = delete;

  // The kernel of d's type; Error "<op>: no <device> kernel" when it has none (op: the calling op's
  // name, the slot's own name when null).
  Fn get(const Device& d, const char* op = nullptr) const {
    const Fn f = find(d, op);
    if (f == nullptr) detail::no_kernel(op ? op : name_, d);
    return f;
  }
  // The kernel of d's type, or nullptr: for kernels a device may lack by contract (the CPU queues
  // nothing to synchronize; a fused kernel the op can replace by its parts).
  Fn find(const Device& d, const char* op = nullptr) const {
    ensure_kernels_registered();
    return fns_[detail::kernel_slot_index(d, op ? op : name_)];
  }
  // Registration (cpu::register_kernels, cuda::register_kernels) and tests; not thread-safe against
  // lookups running at the same time.
  void set(DeviceType t, Fn f) { fns_[detail::kernel_slot_index(t)] = f; }
  const char* name() const { return name_; }

 private:
  static constexpr int kDeviceTypes = 2;  // DeviceType::CPU, DeviceType::CUDA
  const char* name_;
  Fn fns_[kDeviceTypes] = {};
};

}  // namespace kiln

// Defines, in namespace kiln, the slot `<name>_kernel` that a header declares, named "<name>".
#define KILN_DEFINE_KERNEL_SLOT(name) decltype(name##_kernel) name##_kernel(#name)
