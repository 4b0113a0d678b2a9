// PNG (libpng), WebP (libwebp) and BMP (kiln's own reader) decoders (see image_codecs.h).
// NOTE: libpng reports errors by longjmp from its error callback: no C++ object with a destructor
// lives between setjmp and the libpng calls; the image buffer is sized in a try block and an
// allocation failure destroys the libpng structs before it is rethrown.
#include "data/image_codecs.h"

#include <png.h>
#include <webp/decode.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace kiln {

void rgb_to_grey(const uint8_t* rgb, int64_t n, uint8_t* grey) {
  // OpenCV's fixed-point RGB2GRAY (weights 0.299, 0.587, 0.114 in 14 bits). In place is safe:
  // pixel i is written after the three bytes at 3i it reads.
  for (int64_t i = 0; i < n; ++i, rgb += 3)
    grey[i] = static_cast<uint8_t>((rgb[0] * 4899 + rgb[1] * 9617 + rgb[2] * 1868 + (1 << 13)) >> 14);
}

namespace {
uint32_t le16(const uint8_t* p) { return uint32_t{p[0]} | (uint32_t{p[1]} << 8); }
uint32_t le32(const uint8_t* p) { return le16(p) | (le16(p + 2) << 16); }

// --- PNG ------------------------------------------------------------------------------------------
struct PngRead {
  const uint8_t* data;
  size_t size, pos;
  char message[256];
};
void png_read_data(png_structp p, png_bytep dst, size_t n) {
  auto* r = static_cast<PngRead*>(png_get_io_ptr(p));
  if (n > r->size - r->pos) png_error(p, "the file ends inside a chunk (truncated)");
  std::memcpy(dst, r->data + r->pos, n);
  r->pos += n;
}
[[noreturn]] void png_error_fn(png_structp p, png_const_charp msg) {
  auto* r = static_cast<PngRead*>(png_get_error_ptr(p));
  std::snprintf(r->message, sizeof r->message, "%s", msg);
  png_longjmp(p, 1);
}
void png_warning_fn(png_structp, png_const_charp) {}  // ancillary chunks only: dropped, never printed

// 0: decoded; 1: libpng error (message in r); 3: out of memory. `colour` tells whether the decoded
// rows are RGB (then converted to grey by the caller when channels is 1).
int png_run(PngRead& r, int64_t channels, Image& out, bool& rgb_rows) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_error_fn, png_warning_fn);
  if (!png) return 3;
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return 3;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return 1;
  }
  png_set_read_fn(png, &r, png_read_data);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  // kiln's pixel limit was checked on the header
  png_read_info(png, info);
  const int type = png_get_color_type(png, info);
  png_set_expand(png);  // palette -> RGB, grey < 8 bits -> 8, tRNS -> alpha
  if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  const bool grey_file = (type & PNG_COLOR_MASK_COLOR) == 0;
  if (channels == 3 && grey_file) png_set_gray_to_rgb(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int64_t w = png_get_image_width(png, info), hh = png_get_image_height(png, info);
  const int64_t c = png_get_channels(png, info);
  rgb_rows = c == 3;
  bool allocated = true;
  try {
    out.resize(hh, w, c);  // RGB rows for a grey result are converted in place afterwards
  } catch (const std::bad_alloc&) {
    allocated = false;
  }
  if (!allocated || (c != 1 && c != 3)) {
    png_destroy_read_struct(&png, &info, nullptr);
    if (allocated) std::snprintf(r.message, sizeof r.message, "unexpected %d channels after expansion", int(c));
    return allocated ? 1 : 3;
  }
  for (int pass = 0; pass < passes; ++pass)
    for (int64_t y = 0; y < hh; ++y) png_read_row(png, out.data() + y * w * c, nullptr);
  png_read_end(png, nullptr);  // the end of the compressed data: its checksum, nothing left over
  png_destroy_read_struct(&png, &info, nullptr);
  return 0;
}

// --- BMP ------------------------------------------------------------------------------------------
const char* kBmpAccepted =
    "accepted: uncompressed BMPs of 8 (palette), 24 or 32 bits per pixel (BI_RGB, or BI_BITFIELDS with the "
    "standard 8-bit masks); convert others to PNG";
}  // namespace

void decode_png(const uint8_t* data, size_t size, const std::string& name, int64_t channels, const ImageHeader& h,
                Image& out) {
  PngRead r{data, size, 0, "libpng could not allocate its structures"};
  bool rgb_rows = false;
  const int rc = png_run(r, channels, out, rgb_rows);
  KILN_CHECK(rc != 3, name, ": out of memory for the decoded ", h.width, "x", h.height, " PNG image");
  KILN_CHECK(rc == 0, name, ": damaged PNG image (", h.width, "x", h.height, "): libpng: ", r.message);
  KILN_CHECK(out.w == h.width && out.h == h.height, name, ": PNG decoded to ", out.w, "x", out.h, ", its header says ",
             h.width, "x", h.height);
  if (channels == 1 && rgb_rows) {
    rgb_to_grey(out.data(), out.h * out.w, out.data());
    out.c = 1;
  }
}

void decode_webp(const uint8_t* data, size_t size, const std::string& name, int64_t channels, const ImageHeader& h,
                 Image& out) {
  WebPDecoderConfig config;
  KILN_CHECK(WebPInitDecoderConfig(&config), name, ": libwebp version mismatch");
  VP8StatusCode st = WebPGetFeatures(data, size, &config.input);
  KILN_CHECK(st == VP8_STATUS_OK, name, ": damaged WebP header (libwebp status ", int(st), ")");
  KILN_CHECK(!config.input.has_animation, name, ": animated WebP; accepted: still WebP images (lossy, lossless)");
  const int64_t w = config.input.width, hh = config.input.height;
  KILN_CHECK(w == h.width && hh == h.height, name, ": WebP bitstream of ", w, "x", hh, " in a file whose header says ",
             h.width, "x", h.height);
  out.resize(hh, w, 3);
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = out.data();
  config.output.u.RGBA.stride = static_cast<int>(w * 3);
  config.output.u.RGBA.size = static_cast<size_t>(hh * w * 3);
  st = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);  // external memory: frees nothing of ours
  static const char* kStatus[] = {"ok", "out of memory", "invalid parameter", "bitstream error",
                                  "unsupported feature", "suspended", "user abort", "not enough data (truncated)"};
  if (st != VP8_STATUS_OK) out.resize(0, 0, channels);  // never a half-written image
  KILN_CHECK(st == VP8_STATUS_OK, name, ": damaged WebP image (", w, "x", hh, "): libwebp: ",
             int(st) >= 0 && int(st) < 8 ? kStatus[st] : "unknown status");
  if (channels == 1) {
    rgb_to_grey(out.data(), hh * w, out.data());
    out.c = 1;
  }
}

void decode_bmp(const uint8_t* d, size_t n, const std::string& name, int64_t channels, const ImageHeader& h,
                Image& out) {
  // The file header (14 bytes) and the first fields of the DIB header were checked by
  // read_image_header (n >= 26).
  const uint32_t dib = le32(d + 14);
  const bool core = dib == 12;
  KILN_CHECK(core || dib == 40 || dib == 52 || dib == 56 || dib == 108 || dib == 124, name, ": BMP with a ", dib,
             "-byte DIB header; accepted header sizes: 12, 40, 52, 56, 108, 124");
  KILN_CHECK(n >= 14 + uint64_t{dib}, name, ": truncated BMP (", n, " bytes, its ", dib, "-byte header does not fit)");
  const uint32_t planes = core ? le16(d + 22) : le16(d + 26), bpp = core ? le16(d + 24) : le16(d + 28);
  const uint32_t compression = core ? 0 : le32(d + 30);
  const bool top_down = !core && static_cast<int32_t>(le32(d + 22)) < 0;
  KILN_CHECK(planes == 1, name, ": BMP with ", planes, " colour planes (must be 1)");
  KILN_CHECK(bpp == 8 || bpp == 24 || bpp == 32, name, ": BMP of ", bpp, " bits per pixel; ", kBmpAccepted);
  size_t palette_at = 14 + dib;
  if (compression == 3) {  // BI_BITFIELDS: the masks follow a 40-byte header, or are in a larger one
    KILN_CHECK(bpp == 32, name, ": BMP with BI_BITFIELDS at ", bpp, " bits per pixel; ", kBmpAccepted);
    KILN_CHECK(n >= 54 + 12, name, ": truncated BMP (no room for its colour masks)");
    KILN_CHECK(le32(d + 54) == 0x00FF0000u && le32(d + 58) == 0x0000FF00u && le32(d + 62) == 0x000000FFu, name,
               ": BMP with colour masks other than 8-bit B, G, R; ", kBmpAccepted);
    if (dib == 40) palette_at += 12;
  } else {
    KILN_CHECK(compression == 0, name, ": BMP with compression ", compression,
               compression == 1 || compression == 2 ? " (RLE)" : "", "; ", kBmpAccepted);
  }
  const uint64_t w = static_cast<uint64_t>(h.width), hh = static_cast<uint64_t>(h.height);
  const uint64_t stride = (w * bpp + 31) / 32 * 4;
  const uint64_t offset = le32(d + 10);
  // Palette (8 bits): clrUsed entries (0 = 256) of 4 bytes (B, G, R, 0), 3 bytes in a core header.
  const uint64_t entry = core ? 3 : 4;
  uint64_t colors = 0;
  if (bpp == 8) {
    colors = core ? 256 : le32(d + 46);
    if (colors == 0) colors = 256;
    KILN_CHECK(colors <= 256, name, ": BMP palette of ", colors, " colours (at most 256 at 8 bits per pixel)");
    if (core) colors = std::min<uint64_t>(colors, (offset > palette_at ? offset - palette_at : 0) / entry);
    KILN_CHECK(palette_at + colors * entry <= std::min<uint64_t>(offset, n), name, ": BMP palette of ", colors,
               " colours runs past the pixel data at byte ", offset);
  }
  KILN_CHECK(offset >= palette_at && offset <= n && (n - offset) / stride >= hh, name, ": truncated BMP (", n,
             " bytes: ", w, "x", hh, " pixels at ", bpp, " bits need ", stride * hh, " bytes from byte ", offset, ")");
  out.resize(h.height, h.width, 3);
  const uint8_t* pal = d + palette_at;
  for (uint64_t y = 0; y < hh; ++y) {
    const uint8_t* src = d + offset + (top_down ? y : hh - 1 - y) * stride;
    uint8_t* dst = out.data() + y * w * 3;
    for (uint64_t x = 0; x < w; ++x, dst += 3) {
      const uint8_t* bgr;
      if (bpp == 8) {
        const uint8_t i = src[x];
        if (i >= colors) {
          out.resize(0, 0, channels);
          KILN_FAIL(name, ": BMP pixel (", x, ", ", y, ") uses colour ", int(i), " of a ", colors, "-colour palette");
        }
        bgr = pal + i * entry;
      } else {
        bgr = src + x * (bpp / 8);
      }
      dst[0] = bgr[2];
      dst[1] = bgr[1];
      dst[2] = bgr[0];
    }
  }
  if (channels == 1) {
    rgb_to_grey(out.data(), h.height * h.width, out.data());
    out.c = 1;
  }
}

}  // namespace kiln
