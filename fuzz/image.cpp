// Fuzzes image header parsing and decoding (data/image_header.h, data/image_decode.h): the input
// is one encoded image file (JPEG, PNG, BMP, WebP). It goes through what the loader does: header,
// completeness check, reduction factor, a full decode (RGB), and for a JPEG a grey reduced decode
// and a region decode of the centre. max_pixels is lowered to 2^22 so that an accepted header never
// asks for more than a few tens of MB (libFuzzer's malloc limit is the RSS limit, 2 GB).
#include <cstdint>

#include "core/check.h"
#include "data/image_decode.h"
#include "data/image_header.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = "fuzz.img";
  kiln::Image img;
  try {
    kiln::ImageHeader h = kiln::read_image_header(data, size, name);
    kiln::check_image_complete(data, size, h, name);
    (void)kiln::reduction_factor(h, 32);
  } catch (const kiln::Error&) {
  }
  kiln::DecodeOptions o;
  o.max_pixels = int64_t{1} << 22;
  try {
    kiln::decode_image(data, size, name, o, img);
  } catch (const kiln::Error&) {
  }
  try {
    kiln::ImageHeader h = kiln::read_image_header(data, size, name);
    if (h.format == kiln::ImageFormat::jpeg && h.height <= o.max_pixels / h.width) {
      kiln::DecodeOptions grey = o;
      grey.channels = 1;
      grey.min_side = 8;
      kiln::decode_image(data, size, name, grey, img);
      kiln::CropBox want{h.height / 4, h.width / 4, h.height / 2 + 1, h.width / 2 + 1}, got;
      kiln::decode_jpeg_region(data, size, name, o, h, want, img, got);
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}
