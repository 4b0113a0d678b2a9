// Fuzzes the safetensors reader (core/io/safetensors.h): the input is the whole file.
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "core/io/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = kiln::fuzz::write_scratch("model.safetensors", {reinterpret_cast<const char*>(data), size});
  try {
    kiln::SafetensorsContents c = kiln::load_safetensors(path);
    // Touch every byte read, so a tensor that points outside its storage is caught by ASan.
    unsigned sum = 0;
    for (auto& [name, t] : c.tensors) {
      const auto* p = static_cast<const uint8_t*>(t.raw_data());
      for (size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const kiln::Error&) {
  }
  return 0;
}
