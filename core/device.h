// A device is where a tensor's storage lives: the CPU or one CUDA GPU. The device is a property of
// the tensor (no global mode switch); crossing devices is an explicit Tensor::to(device). Also the
// device functions tools and layers use (synchronize, memory, convolution benchmark mode).
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

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

// --- device functions: what layers and tools call instead of a backend's own API (issue #18). Each
// goes through the device's kernel table (core/kernels.h), so no code above core/ names a backend or
// reads the build's CUDA switch; a GPU in a build without CUDA fails in kernels() as every op does.
// Whether `d` has bf16 arithmetic units (core/kernels.h native_bf16): a CPU with AVX-512 BF16 or
// AMX, a GPU of compute capability 8.0 or newer.
bool native_bf16(Device d);
// Waits until the work queued on `d` is done and reports its asynchronous errors (the CPU queues
// nothing: returns at once).
void synchronize(Device d);
// (free, total) bytes of `d`'s memory (a GPU's cudaMemGetInfo). The CPU has none of its own here
// ("memory_info: no cpu kernel"): its RAM is the machine's (tools/engine/autobatch.h cpu_available_bytes()).
std::pair<size_t, size_t> memory_info(Device d);
// The convolution algorithm search of `d`'s backend (cuDNN's benchmark mode; process-wide): on, the
// first convolution of each shape times the algorithms and keeps the fastest; off (the default), the
// library's heuristics choose. A device without one (the CPU) ignores it and reports false.
void set_conv_benchmark(Device d, bool on);
bool conv_benchmark(Device d);
// Starts (on) or stops recording in an attached profiler (`ncu --profile-from-start off`, nsys with
// `--capture-range=cudaProfilerApi`); without a profiler, or on a device without one, it does nothing.
// `kiln bench train profile=1` brackets the timed steps with it.
void profile_range(Device d, bool on);

}  // namespace kiln
