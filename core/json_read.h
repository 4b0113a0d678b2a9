// JSON helpers for options structs and configs: typed reads whose errors name the JSON path
// ("data.train_transforms[1].p: expected a number, got \"half\""), and unknown keys reported with
// the closest accepted key ("unknown key data.workres (did you mean 'workers'?)") found by edit
// distance. Shared by every options struct (core/json_util.h builds its range-checked JsonReader on it).
//
// Typical use in an options struct:
//   JsonObjectReader r(j, path);   // j must be an object (null reads as {})
//   r.read("padding", o.padding);  // optional: keeps the default when absent
//   r.require("size", o.size);     // required
//   r.finish();                    // any key not asked for above is an error
// Tests: tests/data/json_read_test.cpp, tests/core/json_util_test.cpp (range checks).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln {

using Json = nlohmann::json;

// Edit distance where insertion, deletion, substitution and the swap of two neighbours cost 1
// (optimal string alignment), so "paddnig" is one edit from "padding".
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `key` if it is plausibly a typo of it (few edits for its length, same
// letters in another case, or one a prefix of the other); "" when none is close.
std::string closest_match(const std::string& key, const std::vector<std::string>& candidates);

// "data" + "workers" -> "data.workers"; "" + "workers" -> "workers".
std::string json_path(const std::string& parent, const std::string& key);
// "data.train_transforms" + 2 -> "data.train_transforms[2]".
std::string json_path(const std::string& parent, size_t index);

// "a, b, c"
std::string join(const std::vector<std::string>& v, const std::string& sep = ", ");
// "a number", "a string", ... for messages.
std::string json_type_name(const Json& j);

// Throws kiln::Error: "<what> 'value' at <path> (did you mean 'x'?); accepted: a, b".
// `what` is e.g. "unknown key" or "unknown transform type".
[[noreturn]] void fail_unknown_name(const std::string& what, const std::string& value, const std::string& path,
                                    const std::vector<std::string>& accepted);

// Throws when `value` is not one of `accepted`, with a suggestion; `path` names the JSON field.
void check_choice(const std::string& value, const std::vector<std::string>& accepted, const std::string& path);

// Whether `j` holds an integer in [lo, hi] (an integral float such as 2.0 or 1e3 counts); on ok,
// `out` holds it. Shared by every integer field (JsonObjectReader and JsonReader alike).
enum class IntegerCheck { ok, not_integer, out_of_range };
IntegerCheck json_integer(const Json& j, int64_t lo, int64_t hi, int64_t& out);

// Typed conversions; each throws "<path>: expected <type>, got <json>" on a mismatch. Integers
// reject fractions and out-of-range values ("<path>: 1e+30 is out of range; accepted: 64-bit
// integers in [...]"); floating fields accept integers and refuse inf/NaN; a float list also
// accepts a single number.
void json_read(const Json& j, const std::string& path, bool& out);
void json_read(const Json& j, const std::string& path, int& out);
void json_read(const Json& j, const std::string& path, int64_t& out);
void json_read(const Json& j, const std::string& path, uint64_t& out);
void json_read(const Json& j, const std::string& path, double& out);
void json_read(const Json& j, const std::string& path, std::string& out);
void json_read(const Json& j, const std::string& path, std::vector<double>& out);
void json_read(const Json& j, const std::string& path, std::vector<int64_t>& out);

// Lets nlohmann convert an options struct both ways (`j.get<T>()`, `Json j = t;`) through its
// `static T from_json(const Json&, path)` and `Json to_json() const`. Use at namespace kiln scope.
#define KILN_JSON_CONVERSIONS(T)                                         \
  inline void to_json(::kiln::Json& j, const T& o) { j = o.to_json(); } \
  inline void from_json(const ::kiln::Json& j, T& o) { o = T::from_json(j); }

class JsonObjectReader {
 public:
  // Throws if `j` is neither an object nor null (null reads as an empty object).
  // The reader refers to `j`, which must outlive it (hence no temporaries).
  JsonObjectReader(const Json& j, std::string path);
  JsonObjectReader(Json&& j, std::string path) = delete;

  // Reads `key` into `out` when present (returns true); leaves `out` as it is when absent.
  template <typename T>
  bool read(const std::string& key, T& out) {
    const Json* v = get(key);
    if (!v) return false;
    json_read(*v, path_of(key), out);
    return true;
  }
  // Like read(), but a missing key is an error naming its path.
  template <typename T>
  void require(const std::string& key, T& out) {
    if (!read(key, out)) fail_missing(key);
  }
  // The raw value of `key` (nullptr when absent); marks `key` as accepted.
  const Json* get(const std::string& key);
  // Marks `key` as accepted without reading it (a key handled elsewhere, like "type").
  void accept(const std::string& key) { known_.push_back(key); }
  std::string path_of(const std::string& key) const { return json_path(path_, key); }
  const std::string& path() const { return path_; }
  // Throws on the first key of the object that no read/require/get/accept asked for.
  void finish() const;

 private:
  [[noreturn]] void fail_missing(const std::string& key) const;
  const Json* j_;
  std::string path_;
  std::vector<std::string> known_;
};

}  // namespace kiln
