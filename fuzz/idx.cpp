// Fuzzes the IDX reader (data/idx.h): input = images file SEP labels file (fuzz/fuzz_util.h). A part
// that starts with the gzip magic 1f 8b is inflated by the reader (data/file_io.h), so damaged
// and oversized gzip streams are fuzzed too. Every sample of an accepted pair is read back.
#include <cstdint>

#include "core/check.h"
#include "data/idx.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = kiln::fuzz::split_parts(data, size);
  std::string images = kiln::fuzz::write_scratch("images-idx", parts[0]);
  std::string labels = kiln::fuzz::write_scratch("labels-idx", parts.size() > 1 ? parts[1] : std::string_view());
  try {
    kiln::IdxDataset d(images, labels, 10, "fuzz");
    kiln::Sample s;
    for (int64_t i = 0; i < d.size() && i < 64; ++i) d.get_into(i, s);
  } catch (const kiln::Error&) {
  }
  return 0;
}
