// Whole-file reads for the dataset sources. Gzip files (by their magic bytes, whatever the name)
// are inflated with zlib on the fly, so MNIST's .gz files are read where they lie. Every failure is
// a kiln::Error naming the file: missing, unreadable, corrupt or truncated gzip stream.
// Tests: tests/data/sources_test.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

bool file_exists(const std::string& path);

// The bytes of `path`, decompressed when it is gzip.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// The first of root/<name> for name in `names` that exists; otherwise throws
// "<what>: none of root/a, root/b found" so the user sees every name that was tried.
std::string find_file(const std::string& root, const std::vector<std::string>& names, const std::string& what);

}  // namespace kiln
