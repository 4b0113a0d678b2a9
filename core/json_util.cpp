// JSON reading helpers with path-naming errors and "did you mean" suggestions (see json_util.h).
#include "core/json_util.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace kiln {

size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  // Three rows suffice for the transposition rule: d[i-2], d[i-1], d[i].
  std::vector<size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

static std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string closest_match(const std::string& key, const std::vector<std::string>& candidates) {
  const std::string k = lower(key);
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    const std::string lc = lower(c);
    size_t d = edit_distance(k, lc);
    // A prefix ("batch" for "batch_size") is a likely abbreviation even when many edits away.
    bool prefix = k.size() >= 3 && (lc.rfind(k, 0) == 0 || k.rfind(lc, 0) == 0);
    size_t limit = std::max<size_t>(1, std::max(k.size(), lc.size()) / 3);
    if (d > limit && !prefix) continue;
    if (prefix) d = std::min(d, limit);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string json_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}
std::string json_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

std::string json_type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "a list";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    default: return "a value of another kind";
  }
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

void fail_unknown_name(const std::string& what, const std::string& value, const std::string& path,
                       const std::vector<std::string>& accepted) {
  std::string hint = closest_match(value, accepted);
  KILN_FAIL(what, " '", value, "' at ", path.empty() ? "top level" : path,
            hint.empty() ? std::string() : " (did you mean '" + hint + "'?)", "; accepted: ", join(accepted));
}

void check_choice(const std::string& value, const std::vector<std::string>& accepted, const std::string& path) {
  if (std::find(accepted.begin(), accepted.end(), value) == accepted.end())
    fail_unknown_name("value", value, path, accepted);
}

void fail_json_type(const Json& j, const std::string& path, const std::string& expected) {
  KILN_FAIL(path, " must be ", expected, ", not ", json_type_name(j), " ", j.dump());
}

void json_read(const Json& j, const std::string& path, bool& out) {
  if (!j.is_boolean()) fail_json_type(j, path, "true or false");
  out = j.get<bool>();
}

// NOTE: every comparison happens in the value's own type (uint64, int64 or double) before any
// conversion: a cast of 1e30 or 2^64 to int64_t is undefined (it gave -9223372036854775808).
IntegerCheck json_integer(const Json& j, int64_t lo, int64_t hi, int64_t& out) {
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi)) return IntegerCheck::out_of_range;
    if (lo > 0 && u < static_cast<uint64_t>(lo)) return IntegerCheck::out_of_range;
    out = static_cast<int64_t>(u);
    return IntegerCheck::ok;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < lo || v > hi) return IntegerCheck::out_of_range;
    out = v;
    return IntegerCheck::ok;
  }
  if (!j.is_number_float()) return IntegerCheck::not_integer;
  const double d = j.get<double>();  // 2.0 is an integer written as a float; so is 1e30, out of range
  if (!std::isfinite(d) || d != std::floor(d)) return IntegerCheck::not_integer;
  // 2^63 is exactly representable; every double below it converts to int64_t without overflow.
  if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return IntegerCheck::out_of_range;
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) return IntegerCheck::out_of_range;
  const int64_t v = static_cast<int64_t>(d);
  if (v < lo || v > hi) return IntegerCheck::out_of_range;  // hi = 2^63 - 1 rounds up to 2^63 as a double
  out = v;
  return IntegerCheck::ok;
}

void fail_json_range(const Json& j, const std::string& path, const std::string& accepted) {
  KILN_FAIL(path, " = ", j.dump(), " is out of range; accepted: ", accepted);
}

static void read_integer(const Json& j, const std::string& path, int64_t lo, int64_t hi, const char* kind,
                         int64_t& out) {
  switch (json_integer(j, lo, hi, out)) {
    case IntegerCheck::ok: return;
    case IntegerCheck::not_integer: fail_json_type(j, path, "an integer");
    case IntegerCheck::out_of_range:
      fail_json_range(j, path, std::string(kind) + " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
}

void json_read(const Json& j, const std::string& path, int64_t& out) {
  read_integer(j, path, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), "64-bit integers",
               out);
}

void json_read(const Json& j, const std::string& path, int& out) {
  int64_t v = 0;
  read_integer(j, path, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), "32-bit integers", v);
  out = static_cast<int>(v);
}

void json_read(const Json& j, const std::string& path, uint64_t& out) {
  if (j.is_number_unsigned()) {  // the only kind that can exceed int64_t
    out = j.get<uint64_t>();
    return;
  }
  if (j.is_number_float() && j.get<double>() >= 9223372036854775808.0)
    fail_json_range(j, path, "integers in [0, 18446744073709551615]");
  int64_t v = 0;
  read_integer(j, path, 0, std::numeric_limits<int64_t>::max(), "non-negative integers", v);
  out = static_cast<uint64_t>(v);
}

void json_read(const Json& j, const std::string& path, double& out) {
  if (!j.is_number()) fail_json_type(j, path, "a number");
  const double d = j.get<double>();
  // The parser refuses 1e400; a value built in code (or an override) may still be inf or NaN.
  if (!std::isfinite(d)) fail_json_range(j, path, "finite numbers");
  out = d;
}

void json_read(const Json& j, const std::string& path, std::string& out) {
  if (!j.is_string()) fail_json_type(j, path, "a string");
  out = j.get<std::string>();
}

void json_read(const Json& j, const std::string& path, std::vector<double>& out) {
  if (j.is_number()) {
    double d = 0;
    json_read(j, path, d);
    out = {d};
    return;
  }
  if (!j.is_array()) fail_json_type(j, path, "a number or a list of numbers");
  std::vector<double> v(j.size());
  for (size_t i = 0; i < j.size(); ++i) json_read(j[i], json_path(path, i), v[i]);
  out = std::move(v);
}

void json_read(const Json& j, const std::string& path, std::vector<int64_t>& out) {
  if (!j.is_array()) fail_json_type(j, path, "a list of integers");
  std::vector<int64_t> v(j.size());
  for (size_t i = 0; i < j.size(); ++i) json_read(j[i], json_path(path, i), v[i]);
  out = std::move(v);
}

}  // namespace kiln
