// JSON helpers for options structs and configs: typed reads whose errors name the JSON path
// ("data.train_transforms[1].p must be a number, not a string \"half\""), and unknown keys reported with
// the closest accepted key ("unknown key data.workres (did you mean data.workers?)") found by edit
// distance. The one options reader built on them, JsonReader, is in core/json_reader.h.
// Tests: tests/core/json_util_test.cpp, tests/data/options_json_test.cpp, tests/core/json_reader_test.cpp.
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
// `out` holds it. Shared by every integer field.
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

// The errors every typed read gives: "<path> must be <expected>, not <type> <json>" and
// "<path> = <json> is out of range; accepted: <accepted>".
[[noreturn]] void fail_json_type(const Json& j, const std::string& path, const std::string& expected);
[[noreturn]] void fail_json_range(const Json& j, const std::string& path, const std::string& accepted);

// Lets nlohmann convert an options struct both ways (`j.get<T>()`, `Json j = t;`) through its
// `static T from_json(const Json&, path)` and `Json to_json() const`. Use at namespace kiln scope.
#define KILN_JSON_CONVERSIONS(T)                                         \
  inline void to_json(::kiln::Json& j, const T& o) { j = o.to_json(); } \
  inline void from_json(const ::kiln::Json& j, T& o) { o = T::from_json(j); }

}  // namespace kiln
