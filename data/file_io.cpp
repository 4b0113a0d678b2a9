// Whole-file reads, gzip-aware (see file_io.h).
#include "data/file_io.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/check.h"

namespace kiln {

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

static std::vector<uint8_t> read_plain(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  KILN_CHECK(f, "cannot open ", path, ": ", std::strerror(errno));
  std::streamoff n = f.tellg();
  KILN_CHECK(n >= 0, "cannot read the size of ", path);
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(bytes.data()), n);
  KILN_CHECK(f.gcount() == n, "read error on ", path, ": got ", f.gcount(), " of ", n, " bytes");
  return bytes;
}

// Inflates a whole gzip file held in memory (one or more members, as gzip allows).
static std::vector<uint8_t> gunzip(const std::string& path, const std::vector<uint8_t>& gz) {
  // The trailer's ISIZE is the uncompressed size mod 2^32: a good first guess for the buffer.
  size_t guess = gz.size() >= 4 ? (static_cast<size_t>(gz[gz.size() - 4]) | static_cast<size_t>(gz[gz.size() - 3]) << 8 |
                                   static_cast<size_t>(gz[gz.size() - 2]) << 16 |
                                   static_cast<size_t>(gz[gz.size() - 1]) << 24)
                                : 0;
  // A damaged trailer can claim up to 4 GiB: trust it only up to deflate's best ratio (1032:1).
  guess = std::min(guess, gz.size() * 1032);
  std::vector<uint8_t> out(std::max<size_t>(guess, 1 << 16));
  z_stream zs{};
  KILN_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK, "zlib: inflateInit2 failed for ", path);
  zs.next_in = const_cast<Bytef*>(gz.data());
  size_t in_left = gz.size(), produced = 0;
  int rc = Z_OK;
  for (;;) {
    if (produced == out.size()) out.resize(out.size() * 2);
    // avail_in/avail_out are 32-bit: feed and drain at most 1 GiB per call.
    size_t in_now = std::min<size_t>(in_left, 1u << 30);
    zs.avail_in = static_cast<uInt>(in_now);
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    uInt out_before = zs.avail_out;
    rc = inflate(&zs, Z_NO_FLUSH);
    in_left -= in_now - zs.avail_in;
    produced += out_before - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (in_left == 0) break;
      inflateReset(&zs);  // another gzip member follows
      continue;
    }
    if (rc == Z_BUF_ERROR && in_left == 0) break;  // input ran out inside the stream
    if (rc != Z_OK && rc != Z_BUF_ERROR) break;
  }
  std::string msg = zs.msg ? zs.msg : "";
  inflateEnd(&zs);
  KILN_CHECK(rc != Z_BUF_ERROR && rc != Z_OK, "truncated gzip file ", path, ": the compressed stream ends early (",
             produced, " bytes decompressed from ", gz.size(), " compressed)");
  KILN_CHECK(rc == Z_STREAM_END, "corrupt gzip file ", path, ": ", msg.empty() ? "zlib error " + std::to_string(rc) : msg,
             " (after ", produced, " decompressed bytes)");
  out.resize(produced);
  return out;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  KILN_CHECK(file_exists(path), "file not found: ", path);
  std::vector<uint8_t> raw = read_plain(path);
  if (raw.size() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b) return gunzip(path, raw);
  return raw;
}

std::string find_file(const std::string& root, const std::vector<std::string>& names, const std::string& what) {
  std::string tried;
  for (const std::string& n : names) {
    std::string p = (std::filesystem::path(root) / n).string();
    if (file_exists(p)) return p;
    tried += (tried.empty() ? "" : ", ") + p;
  }
  KILN_FAIL(what, ": none of ", tried, " found");
}

}  // namespace kiln
