// Fuzzes the image-list parser (ImageFileDataset::open_list, data/image_folder.h): input = the list
// file SEP the bytes of an image file. The list is written to <scratch>/list.txt beside that image
// (a.png) and a folder named dir.png, so entries can name a real file, a folder, or nothing; the
// first 8 samples of an accepted list are then loaded (decoding a.png whatever it holds).
#include <sys/stat.h>

#include <cstdint>

#include "core/check.h"
#include "data/image_folder.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool made_dir = mkdir((kiln::fuzz::scratch_dir() + "/dir.png").c_str(), 0755) == 0;
  (void)made_dir;
  auto parts = kiln::fuzz::split_parts(data, size);
  std::string list = kiln::fuzz::write_scratch("list.txt", parts[0]);
  kiln::fuzz::write_scratch("a.png", parts.size() > 1 ? parts[1] : std::string_view());
  kiln::DecodeOptions o;
  o.max_pixels = int64_t{1} << 22;  // as fuzz/image.cpp: no accepted image above a few tens of MB
  try {
    auto d = kiln::ImageFileDataset::open_list(list, 0, o, "fuzz");
    kiln::Sample s;
    for (int64_t i = 0; i < d->size() && i < 8; ++i) {
      try {
        d->get_into(i, s);
      } catch (const kiln::Error&) {
      }
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}
