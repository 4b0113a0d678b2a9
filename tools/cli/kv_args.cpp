// key=value command-line arguments (see kv_args.h).
#include "tools/cli/kv_args.h"

#include <cctype>
#include <stdexcept>

#include "core/check.h"
#include "core/json_util.h"
#include "tools/deploy/config.h"

namespace kiln::cli {

KeyValueArgs::KeyValueArgs(std::string cmd, const std::vector<std::string>& args,
                           std::map<std::string, std::string> defaults, Mode mode)
    : cmd_(std::move(cmd)), values_(std::move(defaults)) {
  for (const std::string& a : args) {
    const std::string dashed = dashed_argument_problem(a);  // "--epochs=1": did you mean epochs=1?
    KILN_CHECK(dashed.empty(), cmd_, ": ", dashed);
    const std::optional<KeyValue> kv = split_key_value(a);
    if (kv && values_.count(kv->key)) {
      values_[kv->key] = kv->value;
      given_[kv->key] = true;
      continue;
    }
    if (mode == Mode::overrides) {
      KILN_CHECK(kv.has_value(), cmd_, ": '", a, "' is not key=value; accepted keys: ", accepted(),
                 ", or config overrides such as train.epochs=3");
      overrides_.push_back(a);
      continue;
    }
    std::vector<std::string> keys;
    for (const auto& [key, value] : values_) keys.push_back(key);
    const std::string near = closest_match(kv ? kv->key : a, keys);
    KILN_FAIL(cmd_, ": unknown argument '", a, "'", near.empty() ? "" : " (did you mean " + near + "=?)",
              "; accepted: ", accepted(), " (as key=value)");
  }
}

const std::string& KeyValueArgs::str(const std::string& key) const {
  auto it = values_.find(key);
  KILN_CHECK(it != values_.end(), cmd_, ": no argument ", key, " (a bug: every key needs a default)");
  return it->second;
}

int64_t KeyValueArgs::integer(const std::string& key, int64_t min) const {
  const std::string& v = str(key);
  try {
    size_t used = 0;
    // Digits only (with a sign): std::stoll alone would take " 3" or "+3".
    const bool plain = !v.empty() && (std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == '-');
    const int64_t n = plain ? std::stoll(v, &used) : 0;
    if (plain && used == v.size() && n >= min) return n;
  } catch (const std::exception&) {
  }
  KILN_FAIL(cmd_, ": '", key, "=", v, "': ", key, " takes a whole number >= ", min);
}

std::string KeyValueArgs::accepted() const {
  std::string s;
  for (const auto& [k, v] : values_) s += (s.empty() ? "" : ", ") + k;
  return s;
}

}  // namespace kiln::cli
