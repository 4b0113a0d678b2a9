// A device is where a tensor's storage lives: the CPU or one CUDA GPU. The device is a property of
// the tensor (no global mode switch); crossing devices is an explicit Tensor::to(device).
#pragma once
#include <string>
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

}  // namespace kiln
