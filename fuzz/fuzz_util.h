// Helpers shared by the libFuzzer targets of fuzz/ (docs/testing.md).
//
// Inputs that stand for several files (IDX images + labels, a config + overrides, a list file + an
// image) are split on kSeparator: "part0 SEP part1 SEP part2 ...". The corpus files of
// fuzz/corpus/<target>/ are written that way by fuzz/make_corpus.py.
//
// A target calls the reader and catches kiln::Error only: a damaged input must end in a kiln::Error
// naming it. Any other exception (std::bad_alloc, a JSON library exception, std::out_of_range)
// escapes, terminates the process, and libFuzzer reports it as a crash with the input saved.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::fuzz {

inline constexpr std::string_view kSeparator = "\n--KILN-FUZZ-PART--\n";

inline std::vector<std::string_view> split_parts(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  for (;;) {
    size_t at = all.find(kSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(all.substr(0, at));
    all.remove_prefix(at + kSeparator.size());
  }
  parts.push_back(all);
  return parts;
}

// A folder of this process (libFuzzer's -jobs/-workers run several), made once, under /dev/shm
// when it exists (no disk writes per input) or $TMPDIR. Left in place at exit (the process may be
// killed); it holds only the last input's files.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
    std::string templ = std::string(base) + "/kiln_fuzz_XXXXXX";
    if (!mkdtemp(templ.data())) {
      std::perror("kiln fuzz: mkdtemp");
      std::abort();
    }
    return templ;
  }();
  return dir;
}

// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  std::string path = scratch_dir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::perror(("kiln fuzz: writing " + path).c_str());
    std::abort();
  }
  return path;
}

}  // namespace kiln::fuzz
