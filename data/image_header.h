// Image file headers: the width and height of a JPEG, PNG, BMP or WebP file read from its first
// bytes, before any pixel is decoded, so that a decompression bomb (a small file claiming a huge
// image) is refused without allocating for it, and the reduced-size decoding rule
// (data/image_decode.h) can pick a scale. Also the completeness checks that catch truncated files
// and the plausibility of the declared size against the file's size.
//
//   JPEG  FF D8, then marker segments up to the first start-of-frame (SOFn: C0-C3, C5-C7, C9-CB,
//         CD-CF), whose payload is precision(1) height(2, big-endian) width(2) components(1).
//   PNG   the 8-byte signature, then the IHDR chunk: width(4, big-endian) height(4).
//   BMP   "BM", then the DIB header at byte 14: a 12-byte core header (u16 width, height) or a
//         larger one (i32 width, height; a negative height means top-down rows).
//   WebP  "RIFF" size "WEBP" and a first chunk "VP8 " (lossy: 14-bit sizes after the 9D 01 2A
//         start code), "VP8L" (lossless: 14-bit width-1, height-1 after the 0x2F signature) or
//         "VP8X" (extended: 24-bit canvas width-1, height-1).
// Tests: tests/data/image_file_test.cpp, tests/data/hardened_input_test.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

enum class ImageFormat { jpeg, png, bmp, webp };
const char* image_format_name(ImageFormat f);

struct ImageHeader {
  ImageFormat format = ImageFormat::jpeg;
  int64_t width = 0, height = 0;
};

// Parses the header of an encoded image. Throws kiln::Error naming `name` (the file) when the bytes
// are not one of the four formats, or the header is cut short or malformed.
ImageHeader read_image_header(const uint8_t* data, size_t size, const std::string& name);

// Throws kiln::Error naming `name` when the file is visibly truncated:
//   JPEG: no end-of-image marker (FF D9) after the first start-of-scan (FF DA). Entropy-coded data
//         never holds FF D9 (an FF there is followed by 00 or a restart marker), so the search from
//         the end cannot be fooled by image data, and thumbnails in the header lie before the scan.
//   PNG:  the IEND chunk is missing from the last 64 bytes.
// BMP and WebP are checked by their decoders (which fail on short data).
void check_image_complete(const uint8_t* data, size_t size, const ImageHeader& h, const std::string& name);

// Throws kiln::Error naming `name` when the header's size is implausible for a file of `size`
// bytes, before anything is allocated for the pixels (a small file claiming a large image that its
// data cannot hold: it would decode to filler):
//   JPEG: the entropy-coded data (from the first start-of-scan) must hold at least one bit per
//         8x8 block of a component subsampled 4x4 at most: pixels <= 16384 per byte (Huffman; a
//         real file needs > 1.5 bits per 64 pixels, so 48x slack), 262144 per byte (arithmetic
//         coding, SOF9-SOF15), plus 65536 pixels for tiny images.
//   PNG:  the filtered rows, h * (1 + ceil(w * bits per pixel / 8)) bytes, must fit deflate's
//         best ratio (1032:1) of the file.
//   BMP:  exact, checked by the decoder before it allocates (uncompressed rows).
//   WebP: no ratio bound (a uniform lossless WebP legitimately takes no bits per pixel); only
//         the pixel limit applies.
void check_plausible_size(const uint8_t* data, size_t size, const ImageHeader& h, const std::string& name);

}  // namespace kiln
