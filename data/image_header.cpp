// Header parsers and truncation checks for JPEG, PNG, BMP and WebP (see image_header.h).
#include "data/image_header.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace kiln {

namespace {
uint32_t be16(const uint8_t* p) { return (uint32_t{p[0]} << 8) | p[1]; }
uint32_t be32(const uint8_t* p) { return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]; }
uint32_t le16(const uint8_t* p) { return uint32_t{p[0]} | (uint32_t{p[1]} << 8); }
uint32_t le24(const uint8_t* p) { return le16(p) | (uint32_t{p[2]} << 16); }
uint32_t le32(const uint8_t* p) { return le24(p) | (uint32_t{p[3]} << 24); }

std::string first_bytes(const uint8_t* d, size_t n) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n && i < 8; ++i) {
    if (i) s += ' ';
    s += hex[d[i] >> 4];
    s += hex[d[i] & 15];
  }
  return s.empty() ? "(empty)" : s;
}

bool is_sof(uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

ImageHeader parse_jpeg(const uint8_t* d, size_t n, const std::string& name) {
  size_t p = 2;
  for (;;) {
    while (p < n && d[p] != 0xFF) ++p;    // tolerate junk between segments as libjpeg does
    while (p < n && d[p] == 0xFF) ++p;    // fill bytes
    KILN_CHECK(p < n, name, ": JPEG header ends before its start-of-frame marker (file truncated?)");
    const uint8_t m = d[p++];
    if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // no length field
    KILN_CHECK(m != 0xD9 && m != 0xDA, name, ": JPEG has no start-of-frame marker before ",
               m == 0xD9 ? "its end" : "its image data");
    KILN_CHECK(p + 2 <= n, name, ": JPEG header cut short in marker FF ", std::hex, int{m});
    const size_t len = be16(d + p);
    KILN_CHECK(len >= 2 && p + len <= n, name, ": JPEG marker segment FF ", std::hex, int{m}, std::dec, " of length ",
               len, " runs past the end of the ", n, "-byte file (file truncated?)");
    if (is_sof(m)) {
      KILN_CHECK(len >= 8, name, ": JPEG start-of-frame segment too short (", len, " bytes)");
      ImageHeader h{ImageFormat::jpeg, be16(d + p + 5), be16(d + p + 3)};
      KILN_CHECK(h.width > 0 && h.height > 0, name, ": JPEG frame of ", h.width, "x", h.height,
                 " (a height defined later by a DNL marker is not supported)");
      return h;
    }
    p += len;
  }
}

ImageHeader parse_webp(const uint8_t* d, size_t n, const std::string& name) {
  KILN_CHECK(n >= 30, name, ": WebP header cut short (", n, " bytes)");
  const uint8_t* c = d + 12;  // first chunk: fourcc(4) size(4) data
  const uint8_t* p = d + 20;
  if (std::memcmp(c, "VP8X", 4) == 0) return {ImageFormat::webp, int64_t{le24(p + 4)} + 1, int64_t{le24(p + 7)} + 1};
  if (std::memcmp(c, "VP8L", 4) == 0) {
    KILN_CHECK(p[0] == 0x2F, name, ": WebP lossless chunk without its 0x2f signature");
    const uint32_t bits = le32(p + 1);
    return {ImageFormat::webp, int64_t{bits & 0x3FFF} + 1, int64_t{(bits >> 14) & 0x3FFF} + 1};
  }
  if (std::memcmp(c, "VP8 ", 4) == 0) {
    KILN_CHECK(p[3] == 0x9D && p[4] == 0x01 && p[5] == 0x2A, name, ": WebP lossy chunk without its 9d 01 2a start code");
    return {ImageFormat::webp, int64_t{le16(p + 6) & 0x3FFF}, int64_t{le16(p + 8) & 0x3FFF}};
  }
  KILN_FAIL(name, ": WebP file whose first chunk is \"", std::string(reinterpret_cast<const char*>(c), 4),
            "\"; accepted: VP8, VP8L, VP8X");
}
}  // namespace

const char* image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::jpeg: return "JPEG";
    case ImageFormat::png: return "PNG";
    case ImageFormat::bmp: return "BMP";
    case ImageFormat::webp: return "WebP";
  }
  return "?";
}

ImageHeader read_image_header(const uint8_t* d, size_t n, const std::string& name) {
  KILN_CHECK(n > 0, name, ": empty file (0 bytes); expected a JPEG, PNG, BMP or WebP image");
  ImageHeader h;
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) {
    h = parse_jpeg(d, n, name);
  } else if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) {
    KILN_CHECK(n >= 24 && std::memcmp(d + 12, "IHDR", 4) == 0, name, ": PNG without its IHDR header chunk");
    h = {ImageFormat::png, be32(d + 16), be32(d + 20)};
  } else if (n >= 2 && d[0] == 'B' && d[1] == 'M') {
    KILN_CHECK(n >= 26, name, ": BMP header cut short (", n, " bytes)");
    const uint32_t dib = le32(d + 14);
    if (dib == 12) {
      h = {ImageFormat::bmp, le16(d + 18), le16(d + 20)};
    } else {
      const int32_t w = static_cast<int32_t>(le32(d + 18)), hh = static_cast<int32_t>(le32(d + 22));
      h = {ImageFormat::bmp, w, hh < 0 ? -int64_t{hh} : int64_t{hh}};
    }
  } else if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0) {
    h = parse_webp(d, n, name);
  } else {
    KILN_FAIL(name, ": not a JPEG, PNG, BMP or WebP image (the file starts with ", first_bytes(d, n), ")");
  }
  KILN_CHECK(h.width > 0 && h.height > 0, name, ": ", image_format_name(h.format), " header gives a ", h.width, "x",
             h.height, " image");
  return h;
}

namespace {
// The offset just past the first start-of-scan marker (0 when none) and the first start-of-frame
// marker met before it, walking the marker segments as parse_jpeg does.
struct JpegLayout {
  size_t sos = 0;
  uint8_t sof = 0;
};
JpegLayout jpeg_layout(const uint8_t* d, size_t n) {
  JpegLayout l;
  size_t p = 2;
  while (p + 4 <= n) {
    while (p < n && d[p] != 0xFF) ++p;
    while (p < n && d[p] == 0xFF) ++p;
    if (p + 2 >= n) break;
    const uint8_t m = d[p++];
    if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;
    if (m == 0xDA) {
      l.sos = p;
      break;
    }
    if (is_sof(m) && l.sof == 0) l.sof = m;
    p += be16(d + p);
  }
  return l;
}
}  // namespace

void check_plausible_size(const uint8_t* d, size_t n, const ImageHeader& h, const std::string& name) {
  const int64_t pixels = h.width * h.height;
  if (h.format == ImageFormat::jpeg) {
    const JpegLayout l = jpeg_layout(d, n);
    if (l.sos == 0) return;  // check_image_complete names it
    const bool arithmetic = l.sof >= 0xC9;
    const int64_t per_byte = arithmetic ? 262144 : 16384;
    const int64_t scan = static_cast<int64_t>(n - l.sos);
    KILN_CHECK(pixels <= scan * per_byte + 65536, name, ": JPEG header claims ", h.width, "x", h.height, " = ", pixels,
               " pixels, but its image data is only ", scan, " bytes (at most ", per_byte,
               " pixels a byte are possible); a damaged or crafted file");
  } else if (h.format == ImageFormat::png && n >= 26) {
    const int depth = d[24], type = d[25];
    const int samples = type == 2 ? 3 : type == 4 ? 2 : type == 6 ? 4 : 1;  // 0 grey, 3 palette: 1
    const uint64_t row = 1 + (static_cast<uint64_t>(h.width) * static_cast<uint64_t>(std::max(depth, 1) * samples) + 7) / 8;
    const uint64_t raw = row * static_cast<uint64_t>(h.height);
    KILN_CHECK(raw <= uint64_t{n} * 1032 + 1024, name, ": PNG header claims ", h.width, "x", h.height, " (", raw,
               " bytes of filtered rows), more than the ", n, "-byte file can hold (deflate inflates at most 1032:1); ",
               "a damaged or crafted file");
  }
}

void check_image_complete(const uint8_t* d, size_t n, const ImageHeader& h, const std::string& name) {
  if (h.format == ImageFormat::jpeg) {
    const size_t sos = jpeg_layout(d, n).sos;
    KILN_CHECK(sos > 0, name, ": truncated JPEG (", n, " bytes, no start-of-scan marker: the file ends before its image data)");
    for (size_t i = n - 1; i > sos; --i)
      if (d[i] == 0xD9 && d[i - 1] == 0xFF) return;
    KILN_FAIL(name, ": truncated JPEG (", n, " bytes, no end-of-image marker FF D9 after the image data)");
  }
  if (h.format == ImageFormat::png) {
    const size_t from = n > 64 ? n - 64 : 0;
    for (size_t i = from; i + 4 <= n; ++i)
      if (std::memcmp(d + i, "IEND", 4) == 0) return;
    KILN_FAIL(name, ": truncated PNG (", n, " bytes, no IEND chunk at the end)");
  }
}

}  // namespace kiln
