// Small helpers shared by the layers' and models' options from_json (core/json_reader.h does the
// strict parsing: typed getters, ranges, unknown keys with did-you-mean).
#pragma once
#include <string>

#include "core/json_reader.h"

namespace kiln {

// Upper bound for channel counts, kernel sizes and the like in configs.
inline constexpr int64_t kMaxSize = int64_t{1} << 24;

// A required integer option in [lo, hi]: absent -> "config: PATH.key is required".
inline int64_t require_int(JsonReader& r, const std::string& key, int64_t lo = 1, int64_t hi = kMaxSize) {
  r.require(key);
  return r.get(key, int64_t{0}, lo, hi);
}

// A reader for a layer's options object: the "type" key is the registry's, not the layer's.
inline JsonReader layer_reader(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("type");
  return r;
}

}  // namespace kiln
