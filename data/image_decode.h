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
// libjpeg-turbo; the loader uses it for a first random_resized_crop (docs/data.md).
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

// Region decoding (data/jpeg_decode.cpp, libjpeg-turbo): decodes only the rows of `want` (a box of
// the full image of header `h`) and the iMCU columns around it, into `out`; `got` is where `want`
// lies in `out`. Returns false, decoding nothing, for CMYK/YCCK JPEGs (left to decode_image).
// The pixels equal a full decode's (tests: tests/data/image_file_test.cpp). No reduced decoding.
bool decode_jpeg_region(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& o,
                        const ImageHeader& h, const CropBox& want, Image& out, CropBox& got);

// Region loading for Dataset::get_region_into: reads `path`, checks it as decode_image does, calls
// `choose` with the image's (height, width) and region-decodes a JPEG; returns false for other
// formats (nothing decoded; `choose` may have been called).
bool load_image_region(const std::string& path, const DecodeOptions& o, const std::function<CropBox(int64_t, int64_t)>& choose,
                       Image& out, CropBox& box);

}  // namespace kiln
