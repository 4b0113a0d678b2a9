// kiln::Error formatting (see check.h). Tests: tests/core/json_reader_test.cpp (ErrorLocation.*).
#include "core/check.h"

#include <cstdlib>
#include <cstring>

namespace kiln {
namespace detail {

bool error_locations_enabled() {
#ifndef NDEBUG
  return true;  // debug builds: always
#else
  const char* v = std::getenv("KILN_DEBUG");
  return v && std::strcmp(v, "1") == 0;
#endif
}

void throw_error(const char* file, int line, const std::string& msg) {
  // Users read the message; the source location is for us, so it is only added in debug builds or
  // with KILN_DEBUG=1 (read at each error, so a test or a shell can turn it on at any time).
  if (!error_locations_enabled()) throw Error(msg);
  std::string f(file);
  auto pos = f.rfind("/kiln/");
  if (pos == std::string::npos) {
    for (const char* dir : {"/core/", "/layers/", "/optim/", "/data/", "/models/", "/tools/"}) {
      pos = f.rfind(dir);
      if (pos != std::string::npos) break;
    }
    if (pos != std::string::npos) pos += 1;
  }
  if (pos != std::string::npos && pos < f.size()) f = f.substr(pos);
  throw Error(msg + " (" + f + ":" + std::to_string(line) + ")");
}
}  // namespace detail

std::string shape_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 || std::strcmp(v, "false") == 0));
}

}  // namespace kiln
