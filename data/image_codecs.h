// The per-format decoders behind decode_image (data/image_decode.h); internal to data/.
//   JPEG  libjpeg-turbo (data/jpeg_decode.cpp): DCT scaling by 1/f; CMYK/YCCK converted as OpenCV
//         does (Adobe's inverted CMYK); every corrupt-data warning (emit_message level -1) is an
//         error, except the three that concern only metadata (JFIF revision, Adobe transform, ICC).
//   PNG   libpng: palette, low bit depths and tRNS expanded, 16 bits stripped to 8, alpha dropped,
//         interlacing handled. Its warnings (ancillary chunks: sRGB/iCCP profiles, text) are
//         dropped: they never concern pixels, which libpng reports as errors.
//   WebP  libwebp (lossy, lossless, extended; not animated), alpha dropped.
//   BMP   kiln's own reader: uncompressed 8-bit (palette), 24-bit and 32-bit, bottom-up or
//         top-down, with every field checked against the file before a pixel is read.
// Each writes `out` (resized to the decoded size, `channels` 1 or 3) or throws kiln::Error naming
// `name`; nothing is printed by the libraries. Colour to grey: the luma 0.299 R + 0.587 G +
// 0.114 B (libjpeg's own Y for JPEG).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/dataset.h"
#include "data/image_header.h"

namespace kiln {

void decode_jpeg(const uint8_t* data, size_t size, const std::string& name, int64_t channels, int scale_denom,
                 const ImageHeader& h, Image& out);
void decode_png(const uint8_t* data, size_t size, const std::string& name, int64_t channels, const ImageHeader& h,
                Image& out);
void decode_webp(const uint8_t* data, size_t size, const std::string& name, int64_t channels, const ImageHeader& h,
                 Image& out);
void decode_bmp(const uint8_t* data, size_t size, const std::string& name, int64_t channels, const ImageHeader& h,
                Image& out);

// Replaces the RGB pixels `rgb` (n pixels) by their luma, written to `grey` (may be == rgb).
void rgb_to_grey(const uint8_t* rgb, int64_t n, uint8_t* grey);

}  // namespace kiln
