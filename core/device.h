// A device is where a tensor's storage lives: the CPU or one CUDA GPU. The device is a property of
// the tensor (no global mode switch); crossing devices is an explicit Tensor::to(device). Also the
// device functions tools and layers use (synchronize, memory, convolution benchmark mode), the
// questions code above core/ asks about a device instead of which it is (reads_block,
// has_pinned_host_memory), and the kernel slots of the device services (core/kernel_slot.h).
// Tests: tests/core/tensor_test.cpp (Device.*), tests/core/device_functions_test.cpp,
// tests/gpu/runtime_test.cpp.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/dtype.h"
#include "core/kernel_slot.h"

namespace kiln {

enum class DeviceType { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && (type == DeviceType::CPU || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu" or "cuda:0"
};

// "cpu", "cuda": the kind of device, as errors name it ("silu: no cuda kernel").
const char* device_type_name(DeviceType t);

// Parses one device: "cpu", "0", "cuda", "cuda:1". Asking for a GPU that is not there is a one-line
// error that lists the devices that are:
//   "device=cuda:3: this machine has no such GPU; available: cpu, cuda:0 (NVIDIA H200)"
//   "device=0: this machine has no such GPU; available: cpu (no CUDA device visible)"
Device parse_device(const std::string& s);
// Parses a device list as given on the command line: "cpu", "0", "0,1", "[0,1]", "cuda:0,cuda:1".
// An empty string means the default: the first GPU if there is one, else the CPU. An entry that is
// not on this machine names the whole list and the devices there are:
//   "device=0,1: cuda:1 is not on this machine; available: cpu, cuda:0 (NVIDIA H200)"
std::vector<Device> parse_device_list(const std::string& s);

// The text of a device option read from JSON (train.device), as parse_device_list() takes it:
// a string as it is ("cpu", "0,1", "cuda:1"), an integer 0 as "0", a list [0, 1] or ["cuda:0", 1] as
// "0,1"; null keeps `def`. `device=0` and `device=[0,1]` on the command line arrive as JSON numbers
// and lists, so this is what makes them work. Other kinds throw naming `path` and the accepted forms.
std::string device_option_from_json(const nlohmann::json& j, const std::string& path, const std::string& def);

// Number of visible CUDA devices (0 when built without CUDA or when no driver/GPU is present).
int cuda_device_count();
bool cuda_compiled();
// "cpu, cuda:0 (NVIDIA H200)", or "cpu (no CUDA device visible)" / "cpu (kiln was built without CUDA)".
std::string available_devices();
// The one availability check: throws "<what>: device cuda:0 is not available: kiln was built
// without CUDA" for a GPU in a build without CUDA; returns for every other device. Ops (op_device),
// copies, allocators, communicators and every kernel-slot lookup call it.
void check_available(Device d, const char* what);

// --- device functions: what layers and tools call instead of a backend's own API (issue #18). Each
// goes through the device's kernel slots (declared below), so no code above core/ names a backend
// or reads the build's CUDA switch; a GPU in a build without CUDA fails in check_available().
// Whether `d` has bf16 arithmetic units (native_bf16_kernel): a CPU with AVX-512 BF16 or
// AMX, a GPU of compute capability 8.0 or newer.
bool native_bf16(Device d);
// Waits until the work queued on `d` is done and reports its asynchronous errors (the CPU queues
// nothing: returns at once).
void synchronize(Device d);
// (free, total) bytes of `d`'s memory (a GPU's cudaMemGetInfo). The CPU has none of its own here
// ("memory_info: no cpu kernel"): its RAM is the machine's, host_available_bytes().
std::pair<size_t, size_t> memory_info(Device d);
// Bytes of host memory available to this process now: /proc/meminfo's MemAvailable, 4 GiB when it
// cannot be read. The CPU device's memory is the host's.
double host_available_bytes();
// The convolution algorithm search of `d`'s backend (cuDNN's benchmark mode; process-wide): on, the
// first convolution of each shape times the algorithms and keeps the fastest; off (the default), the
// library's heuristics choose. A device without one (the CPU) ignores it and reports false.
void set_conv_benchmark(Device d, bool on);
bool conv_benchmark(Device d);
// Starts (on) or stops recording in an attached profiler (`ncu --profile-from-start off`, nsys with
// `--capture-range=cudaProfilerApi`); without a profiler, or on a device without one, it does nothing.
// `kiln bench train profile=1` brackets the timed steps with it.
void profile_range(Device d, bool on);

// --- what a device can do, for code that must not ask which device it is.
// Whether reading a value of `d` on the host (Tensor::item(), a copy to the CPU) waits for the work
// queued on `d`: true where the device queues work (a GPU: has a synchronize kernel), false for the
// CPU, whose ops have finished when they return.
bool reads_block(Device d);
// Whether copies between `d` and page-locked host memory (empty_pinned(), core/pinned.h) run
// asynchronously, so staging host data there pays: true for a CUDA device, false for the CPU.
bool has_pinned_host_memory(Device d);
// Whether `d` has memory of its own (a GPU: memory_info answers), or computes in the host's (the CPU,
// whose memory the OS, other processes and other ranks on the machine share).
bool has_own_memory(Device d);
// The memory a run on `d` may still take: the device's free memory, or host_available_bytes() for a
// device that computes in the host's memory.
double free_memory_bytes(Device d);
// Whether `d` computes in `dtype` natively: f32 everywhere; bf16 and f16 where the device has
// the units (native_bf16 for bf16; a GPU for f16; the CPU through oneDNN's own check).
bool native_compute(Device d, DType dtype);

// --- the device services' kernel slots (core/kernel_slot.h), filled by the devices other than the
// CPU (the CPU's memory and runtime are the host's, handled in core/ itself; the CPU fills
// native_bf16 only). `index` is the device's index (cuda:1 -> 1).
extern KernelSlot<std::string (*)(int index)> device_name_kernel;  // "NVIDIA H200"
// Whether the device has bf16 arithmetic units: train.precision = "auto" picks bf16 there.
extern KernelSlot<bool (*)(int index)> native_bf16_kernel;
// Waits until the work queued on the device is done; reports its asynchronous errors. A device that
// queues nothing has none (see reads_block).
extern KernelSlot<void (*)(int index)> synchronize_kernel;
// (free, total) bytes of the device's memory.
extern KernelSlot<std::pair<size_t, size_t> (*)(int index)> memory_info_kernel;
// The convolution library's algorithm search (cuDNN's benchmark mode): on, the first call of a
// shape times the algorithms and keeps the fastest; off, its heuristics choose. Process-wide.
extern KernelSlot<void (*)(bool on)> set_conv_benchmark_kernel;
extern KernelSlot<bool (*)()> conv_benchmark_kernel;
// Marks where an external profiler (ncu --profile-from-start off, nsys --capture-range=cudaProfilerApi)
// starts and stops recording: cudaProfilerStart/Stop on CUDA. Process-wide.
extern KernelSlot<void (*)(bool on)> profile_range_kernel;

}  // namespace kiln
