// Inputs found by the fuzz targets of fuzz/ (docs/testing.md) that once crashed, hit undefined
// behaviour or escaped as something other than a kiln::Error naming the file; each is also a seed
// in fuzz/corpus/<target>/.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data_test_util.h"
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

// fuzz/image_list: a list entry naming a folder was opened, ftell gave LONG_MAX and the read buffer's
// resize ended in std::bad_alloc naming nothing. A pipe would have blocked the loader forever.
TEST(ImageFuzz, FolderOrPipeEntryIsRefusedByName) {
  kiln::testing::TempDir dir;
  std::filesystem::create_directories(dir.file("dir.png"));
  ASSERT_EQ(mkfifo(dir.file("pipe.png").c_str(), 0600), 0);
  std::ofstream(dir.file("list.txt")) << "dir.png 0\npipe.png 1\n";
  auto d = kiln::ImageFileDataset::open_list(dir.file("list.txt"), 0, {}, "t");
  kiln::Sample s;
  expect_error([&] { d->get_into(0, s); }, {dir.file("dir.png"), "not a regular file"});
  expect_error([&] { d->get_into(1, s); }, {dir.file("pipe.png"), "not a regular file"});
}
