#include "core/json_util.h"

#include <algorithm>
#include <cmath>

namespace kiln {

JsonReader::JsonReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
  KILN_CHECK(j_.is_object() || j_.is_null(), "config: ", path_.empty() ? "the config" : path_,
             " must be an object, not ", json_type_name(j_));
}

bool JsonReader::has(const std::string& key) const { return j_.is_object() && j_.contains(key) && !j_.at(key).is_null(); }

const json& JsonReader::raw(const std::string& key) {
  known_.insert(key);
  static const json null_json;
  return has(key) ? j_.at(key) : null_json;
}

const json& JsonReader::require(const std::string& key) {
  KILN_CHECK(has(key), "config: ", path_of(key), " is required");
  return raw(key);
}

bool JsonReader::get(const std::string& key, bool def) {
  const json& v = raw(key);
  if (v.is_null()) return def;
  KILN_CHECK(v.is_boolean(), "config: ", path_of(key), " must be true or false, not ", json_type_name(v), " ", v.dump());
  return v.get<bool>();
}

int64_t JsonReader::get(const std::string& key, int64_t def, int64_t lo, int64_t hi) {
  const json& v = raw(key);
  if (v.is_null()) return def;
  bool integral = v.is_number_integer() || v.is_number_unsigned() ||
                  (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  KILN_CHECK(integral, "config: ", path_of(key), " must be an integer, not ", json_type_name(v), " ", v.dump());
  // NOTE: range-checked before conversion: casting a float beyond int64 (1e30) is undefined, and an
  // unsigned above INT64_MAX (18446744073709551615) would wrap to a negative number.
  const bool fits = v.is_number_float() ? v.get<double>() >= -0x1p63 && v.get<double>() < 0x1p63
                    : v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)
                                             : true;
  KILN_CHECK(fits, "config: ", path_of(key), " = ", v.dump(), " is out of range; accepted: ", lo, "..", hi);
  int64_t x = v.is_number_float() ? static_cast<int64_t>(v.get<double>()) : v.get<int64_t>();
  KILN_CHECK(x >= lo && x <= hi, "config: ", path_of(key), " = ", x, " is out of range; accepted: ", lo, "..", hi);
  return x;
}

double JsonReader::get(const std::string& key, double def, double lo, double hi) {
  const json& v = raw(key);
  if (v.is_null()) return def;
  KILN_CHECK(v.is_number(), "config: ", path_of(key), " must be a number, not ", json_type_name(v), " ", v.dump());
  double x = v.get<double>();
  KILN_CHECK(std::isfinite(x) && x >= lo && x <= hi, "config: ", path_of(key), " = ", x,
             " is out of range; accepted: ", lo, "..", hi);
  return x;
}

std::string JsonReader::get(const std::string& key, const std::string& def) {
  const json& v = raw(key);
  if (v.is_null()) return def;
  KILN_CHECK(v.is_string(), "config: ", path_of(key), " must be a string, not ", json_type_name(v), " ", v.dump());
  return v.get<std::string>();
}

std::string JsonReader::get_choice(const std::string& key, const std::string& def, const std::vector<std::string>& choices) {
  std::string s = get(key, def);
  if (std::find(choices.begin(), choices.end(), s) != choices.end()) return s;
  std::string near = closest_match(s, choices);
  KILN_FAIL("config: ", path_of(key), " = \"", s, "\" is not accepted", near.empty() ? "" : " (did you mean \"" + near + "\"?)",
            "; accepted: ", join(choices));
}

std::vector<double> JsonReader::get_numbers(const std::string& key, const std::vector<double>& def) {
  const json& v = raw(key);
  if (v.is_null()) return def;
  KILN_CHECK(v.is_array(), "config: ", path_of(key), " must be an array of numbers, not ", json_type_name(v));
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    KILN_CHECK(v[i].is_number(), "config: ", path_of(key), "[", i, "] must be a number, not ", json_type_name(v[i]));
    out.push_back(v[i].get<double>());
  }
  return out;
}

std::vector<int64_t> JsonReader::get_ints(const std::string& key, const std::vector<int64_t>& def) {
  const json& v = raw(key);
  if (v.is_null()) return def;
  KILN_CHECK(v.is_array(), "config: ", path_of(key), " must be an array of integers, not ", json_type_name(v));
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    KILN_CHECK(v[i].is_number_integer() || v[i].is_number_unsigned(), "config: ", path_of(key), "[", i,
               "] must be an integer, not ", json_type_name(v[i]), " ", v[i].dump());
    KILN_CHECK(!v[i].is_number_unsigned() || v[i].get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "config: ",
               path_of(key), "[", i, "] = ", v[i].dump(), " is out of range (above 9223372036854775807)");
    out.push_back(v[i].get<int64_t>());
  }
  return out;
}

void JsonReader::finish() const {
  if (!j_.is_object()) return;
  std::vector<std::string> known(known_.begin(), known_.end());
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (known_.count(it.key())) continue;
    std::string near = closest_match(it.key(), known);
    KILN_FAIL("config: unknown key ", path_of(it.key()), near.empty() ? "" : " (did you mean " + path_of(near) + "?)",
              "; accepted keys: ", join(known));
  }
}

}  // namespace kiln
