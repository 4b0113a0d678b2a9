#include "core/check.h"

namespace kiln {
namespace detail {
void throw_error(const char* file, int line, const std::string& msg) {
  // Keep the message first (users read it); the source location is for us.
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
}  // namespace kiln
