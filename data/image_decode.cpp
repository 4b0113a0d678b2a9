// Header-checked decoding, dispatched by format (see image_decode.h and image_codecs.h).
#include "data/image_decode.h"

#include <algorithm>

#include "core/check.h"
#include "data/file_io.h"
#include "data/image_codecs.h"
#include "data/pipeline.h"

namespace kiln {

int reduction_factor(const ImageHeader& h, int64_t min_side) {
  if (min_side <= 0 || h.format != ImageFormat::jpeg) return 1;
  const int64_t s = std::min(h.width, h.height);
  int f = 1;
  for (int g : {2, 4, 8})
    if ((s + g - 1) / g >= min_side) f = g;
  return f;
}

CropBox scale_box(const CropBox& b, int m) {
  KILN_CHECK(m >= 1 && m <= 8, "scale_box: scale ", m, "/8; accepted: 1/8 to 8/8");
  if (m == 8) return b;
  auto at = [m](int64_t e) { return (e * m + 4) / 8; };
  const int64_t top = at(b.top), left = at(b.left);
  return {top, left, at(b.top + b.h) - top, at(b.left + b.w) - left};
}

int region_scale(const CropBox& b, int64_t out_h, int64_t out_w) {
  if (out_h <= 0 || out_w <= 0) return 8;
  for (int m = 1; m < 8; ++m) {
    const CropBox s = scale_box(b, m);
    if (s.h >= out_h && s.w >= out_w) return m;
  }
  return 8;
}

namespace {
// The image the decode would give (JPEG's DCT scaling rounds up, as libjpeg's jdiv_round_up) run
// through the transforms' output_shape: each step bounds its output (data/transform.h).
void check_transform_sizes(const ImageHeader& h, const std::string& name, const DecodeOptions& o) {
  if (!o.transforms) return;
  const int64_t f = reduction_factor(h, o.min_side);
  const ImageShape decoded{(h.height + f - 1) / f, (h.width + f - 1) / f, o.channels};
  try {
    o.transforms->output_shape(decoded);
  } catch (const Error& e) {
    throw Error(name + ": " + image_format_name(h.format) + " image of " + std::to_string(h.width) + "x" +
                std::to_string(h.height) + " (width x height) refused before decoding: " + e.what());
  }
}

// The header, after the checks every decode makes: channels, pixel limit, truncation, plausibility.
ImageHeader checked_header(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& o) {
  KILN_CHECK(o.channels == 1 || o.channels == 3, name, ": decoding to ", o.channels, " channels; accepted: 1 or 3");
  const ImageHeader h = read_image_header(data, size, name);
  // NOTE: a forged header's width * height can pass int64 (a PNG's 2^32-1 x 2^32-1), so the limit is
  // compared by division and the product printed as unsigned (exact below 2^64).
  const bool fits = h.width <= 0 || h.height <= o.max_pixels / h.width;
  KILN_CHECK(fits, name, ": ", image_format_name(h.format), " image of ", h.width, "x", h.height, " = ",
             static_cast<uint64_t>(h.width) * static_cast<uint64_t>(h.height), " pixels is over the limit of ", o.max_pixels,
             " (data.max_image_pixels, a guard against decompression bombs); raise it to accept this image");
  check_image_complete(data, size, h, name);
  check_plausible_size(data, size, h, name);
  check_transform_sizes(h, name, o);
  return h;
}
}  // namespace

void decode_image(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& o, Image& out) {
  try {
    const ImageHeader h = checked_header(data, size, name, o);
    switch (h.format) {
      case ImageFormat::jpeg: decode_jpeg(data, size, name, o.channels, reduction_factor(h, o.min_side), h, out); break;
      case ImageFormat::png: decode_png(data, size, name, o.channels, h, out); break;
      case ImageFormat::webp: decode_webp(data, size, name, o.channels, h, out); break;
      case ImageFormat::bmp: decode_bmp(data, size, name, o.channels, h, out); break;
    }
  } catch (...) {
    out.resize(0, 0, o.channels);  // a failed decode leaves no pixels behind, of this file or an earlier one
    throw;
  }
}

namespace {
thread_local std::vector<uint8_t> t_file_buf;
}

void load_image(const std::string& path, const DecodeOptions& o, Image& out) {
  read_regular_file(path, t_file_buf);
  decode_image(t_file_buf.data(), t_file_buf.size(), path, o, out);
}

bool load_image_region(const std::string& path, const DecodeOptions& o, const Dataset::ChooseBox& choose, Image& out,
                       CropBox& box) {
  read_regular_file(path, t_file_buf);
  const ImageHeader h = checked_header(t_file_buf.data(), t_file_buf.size(), path, o);
  if (h.format != ImageFormat::jpeg) return false;
  const RegionWant want = choose(h.height, h.width);
  return decode_jpeg_region(t_file_buf.data(), t_file_buf.size(), path, o, h, want.box, out, box,
                            region_scale(want.box, want.out_h, want.out_w));
}

}  // namespace kiln
