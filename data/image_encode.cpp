// PNG (libpng) and JPEG (libjpeg-turbo) encoders (see image_encode.h).
// NOTE: both libraries report errors by longjmp: no C++ object with a destructor is created between
// setjmp and the end of the library calls (the output vectors live in the caller's frame).
#include "data/image_encode.h"

#include <png.h>

#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <jpeglib.h>

#include "core/check.h"

namespace kiln {

namespace {
void check_shape(int64_t h, int64_t w, int64_t channels, const std::string& what) {
  KILN_CHECK(channels == 1 || channels == 3, what, ": cannot encode ", channels, " channels; accepted: 1 or 3");
  KILN_CHECK(h > 0 && w > 0 && h <= 65500 && w <= 65500, what, ": cannot encode a ", w, "x", h,
             " image; accepted: 1..65500 pixels a side");
}

// --- PNG ---
struct PngWrite {
  std::vector<uint8_t>* out;
  char message[256];
};
void png_write_data(png_structp p, png_bytep data, size_t n) {
  auto* w = static_cast<PngWrite*>(png_get_io_ptr(p));
  w->out->insert(w->out->end(), data, data + n);
}
void png_flush(png_structp) {}
void png_error_fn(png_structp p, png_const_charp msg) {
  auto* w = static_cast<PngWrite*>(png_get_error_ptr(p));
  std::snprintf(w->message, sizeof w->message, "%s", msg);
  png_longjmp(p, 1);
}
void png_warning_fn(png_structp, png_const_charp) {}  // nothing to stderr

bool png_encode(const uint8_t* px, int64_t h, int64_t w, int64_t c, int compression, std::vector<uint8_t>& out,
                PngWrite& ctx) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &ctx, png_error_fn, png_warning_fn);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, info ? &info : nullptr);
    return false;
  }
  png_set_write_fn(png, &ctx, png_write_data, png_flush);
  png_set_compression_level(png, compression);
  png_set_IHDR(png, info, static_cast<png_uint_32>(w), static_cast<png_uint_32>(h), 8,
               c == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int64_t y = 0; y < h; ++y) png_write_row(png, const_cast<png_bytep>(px + y * w * c));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

// --- JPEG ---
struct JpegErr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};
void jpeg_error_exit(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}
void jpeg_silent(j_common_ptr, int) {}

bool jpeg_encode(const uint8_t* px, int64_t h, int64_t w, int64_t c, const JpegEncodeOptions& o, unsigned char** buf,
                 unsigned long* size, JpegErr& err) {
  jpeg_compress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_error_exit;
  err.pub.emit_message = jpeg_silent;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, buf, size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = static_cast<int>(c);
  cinfo.in_color_space = c == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, o.quality, TRUE);
  if (c == 3 && !o.subsample) cinfo.comp_info[0].h_samp_factor = cinfo.comp_info[0].v_samp_factor = 1;
  if (o.progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(px + static_cast<int64_t>(cinfo.next_scanline) * w * c);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}
}  // namespace

std::vector<uint8_t> encode_png(const uint8_t* pixels, int64_t h, int64_t w, int64_t channels, int compression,
                                const std::string& what) {
  check_shape(h, w, channels, what);
  KILN_CHECK(compression >= 0 && compression <= 9, what, ": PNG compression ", compression, "; accepted: 0..9");
  std::vector<uint8_t> out;
  PngWrite ctx{&out, "libpng could not allocate"};
  KILN_CHECK(png_encode(pixels, h, w, channels, compression, out, ctx), what, ": PNG encoding failed: ", ctx.message);
  return out;
}

std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int64_t h, int64_t w, int64_t channels,
                                 const JpegEncodeOptions& o, const std::string& what) {
  check_shape(h, w, channels, what);
  KILN_CHECK(o.quality >= 1 && o.quality <= 100, what, ": JPEG quality ", o.quality, "; accepted: 1..100");
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  JpegErr err{};
  const bool ok = jpeg_encode(pixels, h, w, channels, o, &buf, &size, err);
  std::vector<uint8_t> out;
  if (ok) out.assign(buf, buf + size);
  std::free(buf);
  KILN_CHECK(ok, what, ": JPEG encoding failed: ", err.message);
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(f, "cannot write ", path, ": ", std::strerror(errno));
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();
  KILN_CHECK(f, "cannot write ", path, " (", bytes.size(), " bytes): ", std::strerror(errno));
}

}  // namespace kiln
