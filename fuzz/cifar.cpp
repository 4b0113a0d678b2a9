// Fuzzes the CIFAR-10 and CIFAR-100 binary readers (data/cifar.h): the input is one batch file,
// read as both kinds; every sample of an accepted file is read back.
#include <cstdint>

#include "core/check.h"
#include "data/cifar.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = kiln::fuzz::write_scratch("data_batch_1.bin", {reinterpret_cast<const char*>(data), size});
  for (kiln::CifarKind kind : {kiln::CifarKind::cifar10, kiln::CifarKind::cifar100}) {
    try {
      kiln::CifarDataset d(kind, {path}, "fuzz");
      kiln::Sample s;
      for (int64_t i = 0; i < d.size(); ++i) d.get_into(i, s);
    } catch (const kiln::Error&) {
    }
  }
  return 0;
}
