// Inputs found by the fuzz targets of fuzz/ (docs/testing.md) that once crashed, hit undefined
// behaviour or escaped as something other than a kiln::Error naming the file; each is also a seed
// in fuzz/corpus/<target>/.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "data/image_decode.h"
#include "tests/expect_error.h"

using kiln::testing::expect_error;

namespace {
// PNG signature + an IHDR chunk of the given size (8-bit RGB) + IEND; CRCs are not checked by the
// header reader.
std::string png_header_only(uint32_t w, uint32_t h) {
  auto be32 = [](uint32_t v) { return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; };
  std::string s = "\x89PNG\r\n\x1a\n";
  s += be32(13) + "IHDR" + be32(w) + be32(h) + std::string("\x08\x02\x00\x00\x00", 5) + be32(0);
  s += be32(0) + "IEND" + be32(0xAE426082u);
  return s;
}
}  // namespace

// fuzz/image, fuzz/image_list: a PNG claiming 4294967295 x 4294967295 pixels made width * height
// overflow int64 (UBSan: signed integer overflow in checked_header), and the wrapped, negative
// product passed the max_pixels guard.
TEST(ImageFuzz, PixelCountBeyondInt64IsRefusedByTheLimit) {
  const std::string png = png_header_only(0xFFFFFFFFu, 0xFFFFFFFFu);
  kiln::Image out;
  expect_error([&] { kiln::decode_image(reinterpret_cast<const uint8_t*>(png.data()), png.size(), "huge.png", {}, out); },
               {"huge.png", "4294967295x4294967295", "18446744065119617025 pixels", "over the limit of 89478485"});
  const std::string wide = png_header_only(0x7FFFFFFFu, 5);  // the product fits, the limit refuses it
  expect_error([&] { kiln::decode_image(reinterpret_cast<const uint8_t*>(wide.data()), wide.size(), "wide.png", {}, out); },
               {"wide.png", "2147483647x5", "over the limit"});
}
