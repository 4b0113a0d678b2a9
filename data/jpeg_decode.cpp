// JPEG decoding with libjpeg-turbo: whole images (decode_jpeg, data/image_codecs.h; DCT scaling by
// 1/2, 1/4, 1/8) and regions (decode_jpeg_region, data/image_decode.h): only the rows of the box
// are colour-converted (jpeg_skip_scanlines entropy-decodes the rows above it; the rows below are
// never decoded) and only the iMCU columns holding the box (jpeg_crop_scanline), at full scale or
// at a DCT scale M/8 (M in 1..8; crop and skip then work in the scaled image's coordinates).
// Corrupt-data warnings are errors (see image_codecs.h); libjpeg prints nothing.
// NOTE: libjpeg reports errors through error_exit (and here emit_message), which must not return:
// they longjmp back here. No C++ object with a destructor lives between setjmp and a longjmp.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>

#include "core/check.h"
#include "data/image_codecs.h"
#include "data/image_decode.h"

namespace kiln {

namespace {
struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void error_exit(j_common_ptr c) {
  ErrorMgr* e = reinterpret_cast<ErrorMgr*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}
// level -1: a warning. Those about damaged data ("Corrupt JPEG data: premature end of data
// segment", "bad Huffman code", "Premature end of JPEG file", ...) mean grey filler or garbage in
// the pixels: an error. Levels >= 0 are trace messages: dropped. Nothing is printed.
void emit_message(j_common_ptr c, int level) {
  if (level >= 0) return;
  const int code = c->err->msg_code;
  if (code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM || code == JWRN_BOGUS_ICC) return;  // metadata only
  c->err->num_warnings++;
  error_exit(c);
}
void output_message(j_common_ptr) {}  // never to stderr

void install(jpeg_decompress_struct& cinfo, ErrorMgr& err) {
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = error_exit;
  err.pub.emit_message = emit_message;
  err.pub.output_message = output_message;
}

// Adobe's inverted CMYK (what Photoshop writes, and OpenCV's conversion): R = K - (255 - C) K / 256.
void cmyk_row_to_rgb(const uint8_t* cmyk, int64_t w, uint8_t* rgb) {
  for (int64_t x = 0; x < w; ++x, cmyk += 4, rgb += 3) {
    const int k = cmyk[3];
    for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>(k - (((255 - cmyk[c]) * k) >> 8));
  }
}

thread_local std::vector<uint8_t> t_cmyk_row;

// The box *want of a started decompression into `out` (*got: where the box lies in it); 0 or 1 as run.
int read_region(jpeg_decompress_struct* cinfo, int64_t channels, const CropBox* want, Image& out, CropBox* got,
                ErrorMgr& err) {
  // The caller's box lies inside the scaled image (scale_box, image_decode.h); checked again
  // here, as a box past the edge would make libjpeg read past the rows it has.
  if (want->top + want->h > int64_t{cinfo->output_height} || want->left + want->w > int64_t{cinfo->output_width}) {
    std::snprintf(err.message, sizeof err.message, "box past the %ux%u scaled image", cinfo->output_width,
                  cinfo->output_height);
    jpeg_destroy_decompress(cinfo);
    return 1;
  }
  // NOTE: the crop's first and last columns are upsampled from chroma without their outer
  // neighbour (edge replication), so they differ from a full decode: widen the request by one
  // iMCU on each side, so that the box's columns are exactly the full decode's. An iMCU is
  // max_h_samp_factor blocks of min_DCT_scaled_size output pixels (DCTSIZE at full scale, M at
  // M/8).
  const int64_t margin = int64_t{cinfo->max_h_samp_factor} * cinfo->min_DCT_scaled_size;
  const int64_t x0 = std::max<int64_t>(0, want->left - margin);
  const int64_t x1 = std::min<int64_t>(cinfo->output_width, want->left + want->w + margin);
  JDIMENSION x = static_cast<JDIMENSION>(x0), w = static_cast<JDIMENSION>(x1 - x0);
  if (x > 0 || w < cinfo->output_width) jpeg_crop_scanline(cinfo, &x, &w);  // aligns x down to an iMCU
  if (want->top > 0) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(want->top));
  out.resize(want->h, w, channels);  // at most the full image's size, which the caller's checks allowed
  for (int64_t y = 0; y < want->h;) {
    JSAMPROW row = out.data() + y * static_cast<int64_t>(w) * channels;
    const JDIMENSION n = jpeg_read_scanlines(cinfo, &row, 1);
    if (n == 0) {  // as below
      std::snprintf(err.message, sizeof err.message, "no data for row %lld", static_cast<long long>(want->top + y));
      jpeg_destroy_decompress(cinfo);
      return 1;
    }
    y += n;
  }
  jpeg_abort_decompress(cinfo);  // the rows below the box are not needed
  jpeg_destroy_decompress(cinfo);
  *got = {0, want->left - static_cast<int64_t>(x), want->h, want->w};
  return 0;
}

// The whole image of a started decompression into `out` (CMYK converted); 0, 1 or 3 as run.
int read_whole(jpeg_decompress_struct* cinfo, bool cmyk, int64_t channels, Image& out, ErrorMgr& err) {
  const int64_t w = cinfo->output_width, hh = cinfo->output_height;
  bool allocated = true;
  try {
    out.resize(hh, w, channels);
    if (cmyk) t_cmyk_row.resize(static_cast<size_t>(w) * 4);
  } catch (const std::bad_alloc&) {
    allocated = false;
  }
  if (!allocated) {
    jpeg_destroy_decompress(cinfo);
    return 3;
  }
  for (int64_t y = 0; y < hh;) {
    uint8_t* dst = out.data() + y * w * channels;
    JSAMPROW row = cmyk ? t_cmyk_row.data() : dst;
    if (jpeg_read_scanlines(cinfo, &row, 1) == 0) {  // not with a memory source (libjpeg warns first), but bounded
      std::snprintf(err.message, sizeof err.message, "no data for row %lld", static_cast<long long>(y));
      jpeg_destroy_decompress(cinfo);
      return 1;
    }
    if (cmyk) {
      cmyk_row_to_rgb(t_cmyk_row.data(), w, channels == 3 ? dst : t_cmyk_row.data());
      if (channels == 1) rgb_to_grey(t_cmyk_row.data(), w, dst);
    }
    ++y;
  }
  jpeg_finish_decompress(cinfo);  // reads up to the end-of-image marker: damage after the last row shows here
  jpeg_destroy_decompress(cinfo);
  return 0;
}

// Decodes the whole image at num/denom (want == nullptr) or only the box *want (region decoding; in
// the coordinates of the image scaled by num/denom; then *got is where the box lies in `out`).
// 0: decoded; 1: libjpeg error (message in err); 2: a CMYK/YCCK region, left to the full decode;
// 3: out of memory for the image.
// NOTE: setjmp stays in this frame, which runs libjpeg directly and through read_region and read_whole:
// a libjpeg error longjmps back here through them, so their locals are all trivially destructible.
int run(const uint8_t* data, size_t size, int64_t channels, int num, int denom, const CropBox* want, Image& out,
        CropBox* got, ErrorMgr& err) {
  jpeg_decompress_struct cinfo;
  install(cinfo, err);
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  if (cmyk && want) {
    jpeg_destroy_decompress(&cinfo);
    return 2;
  }
  cinfo.out_color_space = cmyk ? JCS_CMYK : channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  cinfo.scale_num = static_cast<unsigned>(num);
  cinfo.scale_denom = static_cast<unsigned>(denom);
  jpeg_start_decompress(&cinfo);
  if (want) return read_region(&cinfo, channels, want, out, got, err);
  return read_whole(&cinfo, cmyk, channels, out, err);
}
}  // namespace

void decode_jpeg(const uint8_t* data, size_t size, const std::string& name, int64_t channels, int scale_denom,
                 const ImageHeader& h, Image& out) {
  ErrorMgr err{};
  const int rc = run(data, size, channels, 1, scale_denom, nullptr, out, nullptr, err);
  KILN_CHECK(rc != 3, name, ": out of memory for the decoded ", h.width, "x", h.height, " JPEG image");
  KILN_CHECK(rc == 0, name, ": damaged JPEG image (", h.width, "x", h.height, "): libjpeg: ", err.message);
}

bool decode_jpeg_region(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& o,
                        const ImageHeader& h, const CropBox& want, Image& out, CropBox& got, int scale_eighths) {
  KILN_CHECK(h.format == ImageFormat::jpeg, name, ": region decoding is for JPEGs");
  KILN_CHECK(want.top >= 0 && want.left >= 0 && want.h > 0 && want.w > 0 && want.top + want.h <= h.height &&
                 want.left + want.w <= h.width,
             name, ": box (top ", want.top, ", left ", want.left, ", ", want.h, "x", want.w, ") is outside the ", h.width,
             "x", h.height, " image");
  KILN_CHECK(scale_eighths >= 1 && scale_eighths <= 8, name, ": region decoding at ", scale_eighths,
             "/8; accepted: 1/8 to 8/8");
  const CropBox scaled = scale_box(want, scale_eighths);
  ErrorMgr err{};
  const int rc = scale_eighths == 8 ? run(data, size, o.channels, 1, 1, &want, out, &got, err)
                                    : run(data, size, o.channels, scale_eighths, 8, &scaled, out, &got, err);
  if (rc == 1) out.resize(0, 0, o.channels);  // never a half-written image
  KILN_CHECK(rc != 1, name, ": damaged JPEG image (", h.width, "x", h.height, "): libjpeg: ", err.message);
  return rc == 0;
}

}  // namespace kiln
