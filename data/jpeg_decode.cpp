// Region decoding of JPEGs with libjpeg-turbo (see decode_jpeg_region in image_decode.h): only the
// rows of the box are colour-converted (jpeg_skip_scanlines entropy-decodes the rows above it; the
// rows below are never decoded) and only the iMCU columns holding the box (jpeg_crop_scanline).
// NOTE: libjpeg reports errors through error_exit, which must not return: it longjmps back here.
// No C++ object with a destructor lives between setjmp and a longjmp.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <jpeglib.h>

#include "core/check.h"
#include "data/image_decode.h"

namespace kiln {

namespace {
struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void error_exit(j_common_ptr c) {
  ErrorMgr* e = reinterpret_cast<ErrorMgr*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}
void quiet(j_common_ptr, int) {}  // warnings (e.g. extraneous bytes) are not printed

// 0: decoded; 1: libjpeg error (message in err); 2: a colour space this path leaves to OpenCV.
int decode(const uint8_t* data, size_t size, int64_t channels, const CropBox& want, Image& out, CropBox& got,
           ErrorMgr& err) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = error_exit;
  err.pub.emit_message = quiet;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return 2;
  }
  cinfo.out_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_start_decompress(&cinfo);
  // NOTE: the crop's first and last columns are upsampled from chroma without their outer
  // neighbour (edge replication), so they differ from a full decode: widen the request by one iMCU
  // on each side, so that the box's columns are exactly the full decode's.
  const int64_t margin = int64_t{cinfo.max_h_samp_factor} * DCTSIZE;
  const int64_t x0 = std::max<int64_t>(0, want.left - margin);
  const int64_t x1 = std::min<int64_t>(cinfo.output_width, want.left + want.w + margin);
  JDIMENSION x = static_cast<JDIMENSION>(x0), w = static_cast<JDIMENSION>(x1 - x0);
  if (x > 0 || w < cinfo.output_width) jpeg_crop_scanline(&cinfo, &x, &w);  // aligns x down to an iMCU
  if (want.top > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(want.top));
  out.resize(want.h, w, channels);
  for (int64_t y = 0; y < want.h;) {
    JSAMPROW row = out.data() + y * static_cast<int64_t>(w) * channels;
    y += jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_abort_decompress(&cinfo);  // the rows below the box are not needed
  jpeg_destroy_decompress(&cinfo);
  got = {0, want.left - static_cast<int64_t>(x), want.h, want.w};
  return 0;
}
}  // namespace

bool decode_jpeg_region(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& o,
                        const ImageHeader& h, const CropBox& want, Image& out, CropBox& got) {
  KILN_CHECK(h.format == ImageFormat::jpeg, name, ": region decoding is for JPEGs");
  KILN_CHECK(want.top >= 0 && want.left >= 0 && want.h > 0 && want.w > 0 && want.top + want.h <= h.height &&
                 want.left + want.w <= h.width,
             name, ": box (top ", want.top, ", left ", want.left, ", ", want.h, "x", want.w, ") is outside the ", h.width,
             "x", h.height, " image");
  ErrorMgr err;
  const int rc = decode(data, size, o.channels, want, out, got, err);
  KILN_CHECK(rc != 1, name, ": damaged JPEG image (", h.width, "x", h.height, "): libjpeg: ", err.message);
  return rc == 0;
}

}  // namespace kiln
