// Test images for the data tests, made with kiln's encoders (data/image_encode.h), libwebp's
// encoder and a small BMP writer: no OpenCV imgcodecs.
#pragma once
#include <png.h>
#include <webp/encode.h>

#include <csetjmp>
#include <jpeglib.h>

#include <array>
#include <cstdlib>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/image_codecs.h"
#include "data/image_encode.h"
#include "data_test_util.h"

namespace kiln::testing {

// h x w x c uint8 pixels, RGB or grey.
struct Pixels {
  int64_t h = 0, w = 0, c = 0;
  std::vector<uint8_t> px;
};

// An h x w RGB image whose pixel (y, x, c) is pattern(seed, y, x, c).
inline Pixels pattern_rgb(int64_t h, int64_t w, int64_t seed) {
  Pixels p{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h * w * 3))};
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c) p.px[static_cast<size_t>((y * w + x) * 3 + c)] = pattern(seed, y, x, c);
  return p;
}

inline Pixels to_grey(const Pixels& p) {
  Pixels g{p.h, p.w, 1, std::vector<uint8_t>(static_cast<size_t>(p.h * p.w))};
  rgb_to_grey(p.px.data(), p.h * p.w, g.px.data());
  return g;
}

// An uncompressed bottom-up BMP: 24 bits for RGB, 8 bits with a grey palette for grey (as OpenCV
// writes them), 40-byte BITMAPINFOHEADER.
inline std::vector<uint8_t> encode_bmp(const Pixels& p) {
  const uint32_t bpp = p.c == 3 ? 24 : 8, stride = static_cast<uint32_t>((p.w * bpp + 31) / 32 * 4);
  const uint32_t palette = p.c == 3 ? 0 : 1024, offset = 54 + palette;
  std::vector<uint8_t> b(offset + stride * static_cast<uint32_t>(p.h), 0);
  auto put16 = [&](size_t at, uint32_t v) { b[at] = v & 0xff, b[at + 1] = (v >> 8) & 0xff; };
  auto put32 = [&](size_t at, uint32_t v) { put16(at, v & 0xffff), put16(at + 2, v >> 16); };
  b[0] = 'B', b[1] = 'M';
  put32(2, static_cast<uint32_t>(b.size()));
  put32(10, offset);
  put32(14, 40);
  put32(18, static_cast<uint32_t>(p.w));
  put32(22, static_cast<uint32_t>(p.h));
  put16(26, 1);
  put16(28, bpp);
  put32(34, stride * static_cast<uint32_t>(p.h));
  for (uint32_t i = 0; i < palette / 4; ++i) b[54 + 4 * i] = b[55 + 4 * i] = b[56 + 4 * i] = static_cast<uint8_t>(i);
  for (int64_t y = 0; y < p.h; ++y) {
    uint8_t* row = b.data() + offset + static_cast<size_t>(p.h - 1 - y) * stride;
    for (int64_t x = 0; x < p.w; ++x) {
      const uint8_t* s = p.px.data() + (y * p.w + x) * p.c;
      if (p.c == 1) row[x] = s[0];
      else row[3 * x] = s[2], row[3 * x + 1] = s[1], row[3 * x + 2] = s[0];
    }
  }
  return b;
}

// WebP with libwebp's encoder: lossy at `quality`, or lossless when quality > 100.
inline std::vector<uint8_t> encode_webp(const Pixels& p, float quality) {
  std::vector<uint8_t> rgb = p.px;
  if (p.c == 1) {
    rgb.resize(static_cast<size_t>(p.h * p.w * 3));
    for (int64_t i = 0; i < p.h * p.w; ++i) rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = p.px[i];
  }
  uint8_t* out = nullptr;
  const int w = static_cast<int>(p.w), h = static_cast<int>(p.h);
  const size_t n = quality > 100 ? WebPEncodeLosslessRGB(rgb.data(), w, h, w * 3, &out)
                                 : WebPEncodeRGB(rgb.data(), w, h, w * 3, quality, &out);
  std::vector<uint8_t> b(out, out + n);
  WebPFree(out);
  return b;
}

struct EncodeParams {
  bool progressive = false;  // JPEG
  float webp_quality = 80;   // > 100: lossless
};

// The file bytes of `p` in the format of `ext` (".jpg", ".png", ".bmp", ".webp", any case).
inline std::vector<uint8_t> encode(const Pixels& p, std::string ext, EncodeParams e = {}) {
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (ext == ".png") return encode_png(p.px.data(), p.h, p.w, p.c);
  if (ext == ".bmp") return encode_bmp(p);
  if (ext == ".webp") return encode_webp(p, e.webp_quality);
  JpegEncodeOptions o;
  o.progressive = e.progressive;
  return encode_jpeg(p.px.data(), p.h, p.w, p.c, o);
}

// A w x h 8-bit grey PNG written with libpng directly (kiln's encoder stops at 65500 a side), rows
// of pseudo-random bytes stored uncompressed (level 0): fast to write, and plausible for its size
// (check_plausible_size). 1 x 5,000,000 is a 5 MB file.
inline std::vector<uint8_t> grey_png(uint32_t w, uint32_t h) {
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  std::vector<uint8_t> row(w);
  uint32_t x = 12345;
  for (uint8_t& b : row) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw std::runtime_error("libpng failed to write the test image");
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, png_size_t n) {
        auto* o = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(p));
        o->insert(o->end(), d, d + n);
      },
      nullptr);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  // libpng's default is 1,000,000 a side
  png_set_compression_level(png, 0);
  png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (uint32_t y = 0; y < h; ++y) png_write_row(png, row.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// A CMYK JPEG (as Photoshop writes: Adobe's inverted CMYK) of h x w with every pixel `cmyk`.
inline std::vector<uint8_t> cmyk_jpeg(int h, int w, std::array<uint8_t, 4> cmyk) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 98, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(w) * 4);
  for (int x = 0; x < w; ++x) std::copy(cmyk.begin(), cmyk.end(), row.begin() + 4 * x);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out(buf, buf + size);
  std::free(buf);
  return out;
}

}  // namespace kiln::testing
