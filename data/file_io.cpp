// Whole-file reads, gzip-aware (see file_io.h).
#include "data/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace kiln {

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

namespace {
const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a named pipe (FIFO)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }
};
}  // namespace

void read_regular_file(const std::string& path, std::vector<uint8_t>& buf) {
  // NOTE: O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  KILN_CHECK(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  Fd guard{fd};
  struct stat st {};
  KILN_CHECK(::fstat(fd, &st) == 0, "cannot stat ", path, ": ", std::strerror(errno));
  KILN_CHECK(S_ISREG(st.st_mode), path, ": ", kind_of(st.st_mode), ", not a regular file; only regular files are read");
  const size_t n = static_cast<size_t>(st.st_size);
  buf.resize(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, buf.data() + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    KILN_CHECK(r >= 0, "read error on ", path, ": ", std::strerror(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  KILN_CHECK(got == n, "read error on ", path, ": got ", got, " of ", n, " bytes (the file shrank while read?)");
}

namespace {
// Inflates a whole gzip file held in memory (one or more members, as gzip allows), stopping with
// an error once the output passes what `bound` allows.
std::vector<uint8_t> gunzip(const std::string& path, const std::vector<uint8_t>& gz, const ContentBound& bound) {
  // The trailer's ISIZE is the uncompressed size mod 2^32: a good first guess for the buffer.
  size_t guess = gz.size() >= 4 ? (static_cast<size_t>(gz[gz.size() - 4]) | static_cast<size_t>(gz[gz.size() - 3]) << 8 |
                                   static_cast<size_t>(gz[gz.size() - 2]) << 16 |
                                   static_cast<size_t>(gz[gz.size() - 1]) << 24)
                                : 0;
  // A damaged trailer can claim up to 4 GiB: trust it only up to deflate's best ratio (1032:1).
  const size_t max_ratio = gz.size() * 1032;
  guess = std::min(guess, max_ratio);
  uint64_t limit = 0;  // from `bound`, once known
  // With a bound, nothing big is allocated before the header is read.
  std::vector<uint8_t> out(bound ? size_t{1} << 16 : std::max<size_t>(guess, 1 << 16));
  z_stream zs{};
  KILN_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK, "zlib: inflateInit2 failed for ", path);
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&zs};  // also when `bound` throws (a header that is not the expected format)
  zs.next_in = const_cast<Bytef*>(gz.data());
  size_t in_left = gz.size(), produced = 0;
  int rc = Z_OK;
  bool over = false;
  auto learn_limit = [&] {
    if (!bound || limit > 0) return;
    limit = bound(out.data(), produced);
    // A declared size that no deflate stream of this file could reach is refused up front.
    KILN_CHECK(limit == 0 || limit <= max_ratio + 64, "corrupt gzip file ", path, ": its content declares ", limit,
               " bytes, more than the ", gz.size(), " compressed bytes can hold (deflate inflates at most 1032:1)");
    if (limit > 0) out.resize(std::max(out.size(), static_cast<size_t>(limit) + 1));  // one byte past shows "over"
  };
  for (;;) {
    learn_limit();
    if (limit > 0 && produced > limit) {
      over = true;
      break;
    }
    if (produced == out.size()) {
      out.resize(out.size() * 2);
    }
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
  if (!over) learn_limit();
  KILN_CHECK(!over && (limit == 0 || produced <= limit), "corrupt gzip file ", path, ": it inflates past the ", limit,
             " bytes its header declares (stopped there; a gzip bomb or a damaged header)");
  KILN_CHECK(rc != Z_BUF_ERROR && rc != Z_OK, "truncated gzip file ", path, ": the compressed stream ends early (",
             produced, " bytes decompressed from ", gz.size(), " compressed)");
  KILN_CHECK(rc == Z_STREAM_END, "corrupt gzip file ", path, ": ", msg.empty() ? "zlib error " + std::to_string(rc) : msg,
             " (after ", produced, " decompressed bytes)");
  out.resize(produced);
  return out;
}
}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path, const ContentBound& bound) {
  KILN_CHECK(file_exists(path), "file not found: ", path);
  std::vector<uint8_t> raw;
  read_regular_file(path, raw);
  if (raw.size() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b) return gunzip(path, raw, bound);
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
