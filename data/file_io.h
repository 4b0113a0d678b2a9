// Whole-file reads for the dataset sources. Gzip files (by their magic bytes, whatever the name)
// are inflated with zlib on the fly, so MNIST's .gz files are read where they lie. Every failure is
// a kiln::Error naming the file: missing, not a regular file, unreadable, corrupt or truncated gzip
// stream, a gzip stream that inflates past the size its content declares.
//
// Only regular files are read: the file is opened with O_NONBLOCK (so a named pipe cannot block
// open()) and checked with fstat before a byte is read; a directory, FIFO, socket or device is
// refused by name. Tests: tests/data/sources_test.cpp, tests/data/hardened_input_test.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln {

bool file_exists(const std::string& path);

// The bytes of the regular file `path` into `buf` (reused), undecompressed. Errors name the file.
void read_regular_file(const std::string& path, std::vector<uint8_t>& buf);

// The most bytes the decompressed content may hold, given its first `n` bytes; 0 = "not known
// yet, give me more" (called again as more is inflated; with everything when the stream ends).
// The reader of a format with a size in its header (IDX) passes one, so that a small .gz file
// cannot inflate to gigabytes: inflation stops with an error at the declared size.
using ContentBound = std::function<uint64_t(const uint8_t* data, size_t n)>;

// The bytes of `path`, decompressed when it is gzip (bounded by `bound` when given).
std::vector<uint8_t> read_file_bytes(const std::string& path, const ContentBound& bound = {});

// The first of root/<name> for name in `names` that exists; otherwise throws
// "<what>: none of root/a, root/b found" so the user sees every name that was tried.
std::string find_file(const std::string& root, const std::vector<std::string>& names, const std::string& what);

}  // namespace kiln
