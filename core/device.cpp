// Device names, the parsing of device=... (the trainer's train.device, `kiln bench ... device=`) and
// the device functions and capabilities, through the device services' kernel slots.
// Tests: tests/core/tensor_test.cpp (Device.*), tests/data/config_test.cpp (device=0, [0,1], lists on a
// machine without those GPUs), tests/gpu/runtime_test.cpp.
#include "core/device.h"

#include "core/dnnl_context.h"

#include <algorithm>
#include <cctype>
#include <fstream>

#include "core/check.h"
#include "core/json_util.h"
#include "core/pinned.h"

namespace kiln {

KILN_DEFINE_KERNEL_SLOT(device_name);
KILN_DEFINE_KERNEL_SLOT(native_bf16);
KILN_DEFINE_KERNEL_SLOT(synchronize);
KILN_DEFINE_KERNEL_SLOT(memory_info);
KILN_DEFINE_KERNEL_SLOT(set_conv_benchmark);
KILN_DEFINE_KERNEL_SLOT(conv_benchmark);
KILN_DEFINE_KERNEL_SLOT(profile_range);

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

const char* device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

// cuda_device_count() and cuda_compiled(): core/cuda/runtime.cu, or core/kernel_slot.cpp in a build
// without CUDA.

void check_available(Device d, const char* what) {
  KILN_CHECK(!d.is_cuda() || cuda_compiled(), what, ": device ", d.str(), " is not available: kiln was built without CUDA");
}

std::string available_devices() {
  int n = cuda_device_count();
  std::string s = "cpu";
  for (int i = 0; i < n; ++i) {
    const Device d = Device::cuda(i);
    s += ", " + d.str() + " (" + device_name_kernel.get(d)(i) + ")";
  }
  if (n == 0) s += cuda_compiled() ? " (no CUDA device visible)" : " (kiln was built without CUDA)";
  return s;
}

bool native_bf16(Device d) { return native_bf16_kernel.get(d)(d.index); }

void synchronize(Device d) {
  if (const auto f = synchronize_kernel.find(d)) f(d.index);  // none: the device queues nothing (the CPU)
}

std::pair<size_t, size_t> memory_info(Device d) { return memory_info_kernel.get(d)(d.index); }

double host_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 4.0 * (1 << 30);
}

void set_conv_benchmark(Device d, bool on) {
  if (const auto f = set_conv_benchmark_kernel.find(d)) f(on);
}

void profile_range(Device d, bool on) {
  if (const auto f = profile_range_kernel.find(d)) f(on);
}

bool conv_benchmark(Device d) {
  const auto f = conv_benchmark_kernel.find(d);
  return f && f();
}

bool reads_block(Device d) { return synchronize_kernel.find(d, "reads_block") != nullptr; }

bool has_pinned_host_memory(Device d) { return pinned_alloc_kernel.find(d, "has_pinned_host_memory") != nullptr; }

bool has_own_memory(Device d) { return memory_info_kernel.find(d, "has_own_memory") != nullptr; }

bool native_compute(Device d, DType dtype) {
  if (dtype == DType::f32) return true;
  if (d.is_cpu()) return onednn::native_compute(dtype);  // AVX-512 BF16, AVX512-FP16 or AMX
  return dtype == DType::bf16 ? native_bf16(d) : true;
}

double free_memory_bytes(Device d) {
  return has_own_memory(d) ? static_cast<double>(memory_info(d).first) : host_available_bytes();
}

Device parse_device(const std::string& raw) {
  std::string s;
  for (char c : raw)
    if (!std::isspace(static_cast<unsigned char>(c))) s += static_cast<char>(std::tolower(c));
  if (s == "cpu") return Device::cpu();
  std::string num = s;
  if (s == "cuda" || s == "gpu") num = "0";
  else if (s.rfind("cuda:", 0) == 0) num = s.substr(5);
  bool digits = !num.empty();
  for (char c : num) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  KILN_CHECK(digits && num.size() < 6, "device=", raw,
             ": not understood; accepted: cpu, N, cuda:N, a list such as 0,1; available: ", available_devices());
  int idx = std::stoi(num);
  KILN_CHECK(idx < cuda_device_count(), "device=", raw, ": this machine has no such GPU; available: ",
             available_devices());
  return Device::cuda(idx);
}

std::string device_option_from_json(const Json& j, const std::string& path, const std::string& def) {
  auto entry = [&](const Json& e, const std::string& p) -> std::string {
    if (e.is_string()) return e.get<std::string>();
    int64_t i = 0;
    if (json_integer(e, 0, 65535, i) == IntegerCheck::ok) return std::to_string(i);
    KILN_FAIL(p, ": expected a device (\"cpu\", a GPU number such as 0, \"cuda:1\") or a list of GPUs such as "
              "[0, 1] or \"0,1\", got ", json_type_name(e), " ", e.dump());
  };
  if (j.is_null()) return def;
  if (!j.is_array()) return entry(j, path);
  std::string s;
  for (size_t i = 0; i < j.size(); ++i) {
    KILN_CHECK(!j[i].is_array(), json_path(path, i), ": a device list holds devices, not lists, got ", j.dump());
    s += (i ? "," : "") + entry(j[i], json_path(path, i));
  }
  KILN_CHECK(!s.empty(), path, ": an empty device list; accepted: \"cpu\", 0, [0, 1], \"cuda:1\" (or leave it unset)");
  return s;
}

std::vector<Device> parse_device_list(const std::string& raw) {
  std::string s;
  for (char c : raw)
    if (c != '[' && c != ']' && c != '\'' && c != '"') s += c;
  std::vector<Device> out;
  if (s.empty()) {
    out.push_back(cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu());
    return out;
  }
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    KILN_CHECK(!part.empty(), "device list '", raw, "' has an empty entry; write e.g. device=0,1");
    Device d;
    try {
      d = parse_device(part);
    } catch (const Error&) {
      if (out.empty() && comma == std::string::npos) throw;  // a single device: its own message says it all
      // Name the whole list (what the user typed) and the entry that is not here.
      std::string e = part;
      for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      bool digits = !e.empty() && e.size() < 6 && std::all_of(e.begin(), e.end(), [](unsigned char c) { return std::isdigit(c); });
      KILN_FAIL("device=", raw, ": ", digits ? "cuda:" + e : "'" + part + "'",
                digits || e.rfind("cuda", 0) == 0 ? " is not on this machine" : " is not a device (accepted: cpu, N, cuda:N)",
                "; available: ", available_devices());
    }
    for (const Device& o : out) KILN_CHECK(o != d, "device list '", raw, "' names ", d.str(), " twice");
    out.push_back(d);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  KILN_CHECK(out.size() == 1 || out[0].is_cuda(), "device list '", raw, "': cpu cannot be combined with other devices");
  return out;
}

}  // namespace kiln
