// Decoding of JPEG, PNG, BMP and WebP files into uint8 HWC images, RGB or one grey channel, with
// the libraries made for each format (data/image_codecs.h): libjpeg-turbo, libpng, libwebp, and
// kiln's own reader for uncompressed BMPs. OpenCV is not involved (kiln links only its core and
// imgproc). A decode either fills `out` with this file's pixels or throws kiln::Error naming the
// file; nothing is printed by the decoders (their warnings are errors or dropped, see
// image_codecs.h).
//
// Before any pixel is decoded the header is parsed (data/image_header.h):
//   - an image of more than max_pixels pixels is refused (a decompression bomb guard; PIL's limit
//     89478485 is the default), the error naming the file and its dimensions;
//   - a truncated JPEG or PNG is an error;
//   - a declared size the file cannot plausibly hold is an error (check_plausible_size);
//   - with DecodeOptions::transforms set, the size the decode would give (after reduced decoding) is
//     run through Pipeline::output_shape, so an image that would make a step produce more than
//     kMaxTransformPixels (data/transform.h; a 1 x 5,000,000 PNG through resize(256)) is refused,
//     naming the file, its size and the step, before its pixels are decoded. The transforms bound
//     themselves as well when they run (the safety net, for sources without files).
// EXIF orientation is ignored, as PIL and torchvision's ImageFolder do.
//
// Reduced-size decoding: with min_side > 0, a JPEG is decoded at 1/f of its size (libjpeg's DCT
// scaling; faster, and an area-like filter) for the largest f in {2, 4, 8} whose reduced shorter
// side ceil(short / f) is still >= min_side. Other formats always decode at full size.
// Pipeline::min_source_side() (data/pipeline.h) computes min_side for a pipeline.
//
// Region decoding (decode_jpeg_region, data/jpeg_decode.cpp) decodes only a box of a JPEG with
// libjpeg-turbo; the loader uses it for a first random_resized_crop (docs/data.md). When the box
// will be resized to a smaller output (RegionWant::out_h/out_w, data/dataset.h), the box is decoded
// at a DCT scale M/8 (region_scale below: the smallest M that keeps the output size in both
// dimensions, so the resize after it still shrinks or copies, never enlarges); the box's edges are
// rounded to the scaled image's pixels (scale_box): at most half a scaled pixel each.
// Files are read with read_regular_file (data/file_io.h): only regular files are opened.
// Tests: tests/data/image_file_test.cpp, tests/data/hardened_input_test.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_header.h"

namespace kiln {

class Pipeline;  // data/pipeline.h

struct DecodeOptions {
  int64_t channels = 3;            // 3: RGB, 1: grey (luma of the colour image)
  int64_t max_pixels = 89478485;   // width * height above this is refused
  int64_t min_side = 0;            // reduced decoding (see above); 0 = always full size
  // The transforms the decoded image will go through (see above); null: no check at the header.
  std::shared_ptr<const Pipeline> transforms;
};

// The scale divisor 1, 2, 4 or 8 the rule above picks for an image with header `h`.
int reduction_factor(const ImageHeader& h, int64_t min_side);

// Decodes the encoded image in data[0, size) into `out` (reusing its buffer). Errors name `name`.
void decode_image(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& o, Image& out);

// read_regular_file (data/file_io.h: only regular files, errors name the file) + decode_image, with a
// per-thread buffer.
void load_image(const std::string& path, const DecodeOptions& o, Image& out);

// The box `b` of a full image in the coordinates of the image DCT-scaled by m/8 (m in 1..8): each
// edge e becomes round(e * m / 8) (half up). Scaled pixel i covers the full image's
// [8i/m, 8(i+1)/m), so an edge moves by at most half a scaled pixel. m = 8: `b` itself.
CropBox scale_box(const CropBox& b, int m);
// The DCT scale m/8 (m in 1..8) for decoding box `b` that is then resized to out_h x out_w: the
// smallest m whose scale_box is at least out_h x out_w; 8 (full scale) when out_h or out_w is 0 or
// no smaller m keeps the size.
int region_scale(const CropBox& b, int64_t out_h, int64_t out_w);

// Region decoding (data/jpeg_decode.cpp, libjpeg-turbo): decodes only the rows of `want` (a box of
// the full image of header `h`) and the iMCU columns around it, into `out`, at the DCT scale
// scale_eighths/8 (8: full size); `got` is where scale_box(want, scale_eighths) lies in `out`.
// Returns false, decoding nothing, for CMYK/YCCK JPEGs (left to decode_image). At full size the
// pixels equal a full decode's; at m/8 those of a whole-image decode at m/8 (tests:
// tests/data/image_file_test.cpp, tests/data/scaled_region_test.cpp).
bool decode_jpeg_region(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& o,
                        const ImageHeader& h, const CropBox& want, Image& out, CropBox& got, int scale_eighths = 8);

// Region loading for Dataset::get_region_into: reads `path`, checks it as decode_image does, calls
// `choose` with the image's (height, width) and region-decodes a JPEG, at region_scale(box, out_h,
// out_w) of what `choose` returned; returns false for other formats (nothing decoded; `choose` may
// have been called). `box` is where the (scaled) box lies in `out`.
bool load_image_region(const std::string& path, const DecodeOptions& o, const Dataset::ChooseBox& choose, Image& out,
                       CropBox& box);

}  // namespace kiln
