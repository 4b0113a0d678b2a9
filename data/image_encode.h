// Encoding of uint8 HWC images (RGB or one grey channel) to PNG with libpng and to JPEG with
// libjpeg-turbo: `kiln data export`, the training plots (tools/engine/metrics.cpp) and the tests' image
// files. Errors (kiln::Error) name `what`; nothing is printed by the libraries.
// Tests: tests/data/image_file_test.cpp (round trips through decode_image).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct JpegEncodeOptions {
  int quality = 95;          // 1..100
  bool progressive = false;  // a progressive JPEG (several scans) instead of a baseline one
  bool subsample = true;     // colour: chroma at half resolution both ways (4:2:0), as PIL and OpenCV write
};

// `pixels`: h x w x channels (channels 1 or 3, RGB), rows packed.
std::vector<uint8_t> encode_png(const uint8_t* pixels, int64_t h, int64_t w, int64_t channels, int compression = 3,
                                const std::string& what = "image");
std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int64_t h, int64_t w, int64_t channels,
                                 const JpegEncodeOptions& o = {}, const std::string& what = "image");

// Writes `bytes` to `path` (replacing it). Errors name the file.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace kiln
