// Errors: library code throws kiln::Error (never exit/abort). KILN_CHECK(cond, parts...) formats
// every part with operator<<, so messages can carry the values that were wrong. The source location
// (" (core/tensor.cpp:47)") is appended only in debug builds or when KILN_DEBUG=1 is set.
// The CLI catches at the top, prints one line and exits non-zero.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include <cstdint>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown when a device allocation fails; AutoBatch catches this one to back off.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A problem over a library's size limit (cuDNN's 2^31 elements per tensor): like running out of
// memory, a smaller batch fits, so AutoBatch treats it as "does not fit". `excess` is how many
// times over the limit the request is (elements asked / elements allowed, > 1; 0 if unknown).
class TooLargeError : public OutOfMemoryError {
 public:
  TooLargeError(const std::string& what, double excess) : OutOfMemoryError(what), excess_(excess) {}
  double excess() const { return excess_; }

 private:
  double excess_ = 0;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... R>
void append(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  append(os, rest...);
}
template <typename... A>
std::string cat(const A&... a) {
  std::ostringstream os;
  append(os, a...);
  return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
// True in debug builds, or when the environment variable KILN_DEBUG is "1".
bool error_locations_enabled();
}  // namespace detail

// "[2, 3, 4]" for shapes and other int lists in messages.
std::string shape_str(const std::vector<int64_t>& v);

// An on/off switch read from the environment (kiln's A/B switches, e.g. KILN_FUSED_BN_RELU): off
// when the variable is "0", "off" or "false"; on otherwise, unset included.
bool env_switch_on(const char* name);

}  // namespace kiln

#define KILN_CHECK(cond, ...)                                                       \
  do {                                                                              \
    if (!(cond)) ::kiln::detail::throw_error(__FILE__, __LINE__, ::kiln::detail::cat(__VA_ARGS__)); \
  } while (0)

#define KILN_FAIL(...) ::kiln::detail::throw_error(__FILE__, __LINE__, ::kiln::detail::cat(__VA_ARGS__))
