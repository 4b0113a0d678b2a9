// See json_util.h.
#include "core/json_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace kiln {

namespace {
thread_local KeyRecorder* g_recorder = nullptr;

std::string number_str(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// "0..64", ">= 0" (no upper bound worth printing)
std::string int_range(int64_t lo, int64_t hi) {
  if (hi == std::numeric_limits<int64_t>::max()) return ">= " + std::to_string(lo);
  return std::to_string(lo) + ".." + std::to_string(hi);
}
}  // namespace

KeyRecorder::KeyRecorder() : previous_(g_recorder) { g_recorder = this; }
KeyRecorder::~KeyRecorder() { g_recorder = previous_; }
KeyRecorder* KeyRecorder::current() { return g_recorder; }

void KeyRecorder::note(KeyRecord rec) {
  for (KeyRecord& k : keys_) {
    if (k.path != rec.path) continue;
    if (!rec.type.empty() && (k.type.empty() || k.type == "JSON")) {
      k.type = rec.type;
      if (!k.has_default && rec.has_default) k.def = rec.def, k.has_default = true;
    }
    if (k.accepted.empty()) k.accepted = rec.accepted;
    k.required = k.required || rec.required;
    return;
  }
  keys_.push_back(std::move(rec));
}

void JsonReader::note(const std::string& key, const char* type, json def, bool has_default, std::string accepted,
                      bool required) const {
  if (g_recorder) g_recorder->note({path_of(key), type, std::move(def), has_default, required, std::move(accepted)});
}

JsonReader::JsonReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
  if (!j_.is_object() && !j_.is_null()) fail_json_type(j_, path_.empty() ? "config" : path_, "an object");
}

bool JsonReader::has(const std::string& key) const {
  if (!j_.is_object()) return false;
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

void JsonReader::allow(const std::string& key) {
  note(key, "", json(), false);
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
}

const json* JsonReader::lookup(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  return has(key) ? &j_.at(key) : nullptr;
}

const json* JsonReader::find(const std::string& key) {
  const json* v = lookup(key);
  if (v) note(key, "JSON", json(), false);  // an absent key is only probed for
  return v;
}

const json& JsonReader::raw(const std::string& key) {
  static const json null_json;
  note(key, "JSON", json(), false);
  const json* v = lookup(key);
  return v ? *v : null_json;
}

const json& JsonReader::require(const std::string& key) {
  note(key, "JSON", json(), false, "", true);
  const json* v = lookup(key);
  if (!v) fail_missing(key);
  return *v;
}

bool JsonReader::get(const std::string& key, bool def) {
  read(key, def);
  return def;
}

int64_t JsonReader::get(const std::string& key, int64_t def, int64_t lo, int64_t hi) {
  note(key, "integer", def, true, int_range(lo, hi));
  const json* v = lookup(key);
  if (!v) return def;
  int64_t x = 0;
  switch (json_integer(*v, lo, hi, x)) {  // range-checked before any conversion (core/json_util.h)
    case IntegerCheck::ok: return x;
    case IntegerCheck::not_integer: fail_json_type(*v, path_of(key), "an integer");
    case IntegerCheck::out_of_range:
      fail_json_range(*v, path_of(key), std::to_string(lo) + ".." + std::to_string(hi));
  }
  return def;
}

double JsonReader::get(const std::string& key, double def, double lo, double hi) {
  note(key, "number", def, true, number_str(lo) + ".." + number_str(hi));
  const json* v = lookup(key);
  if (!v) return def;
  double x = def;
  json_read(*v, path_of(key), x);  // a number, finite
  if (!(x >= lo && x <= hi)) fail_json_range(*v, path_of(key), number_str(lo) + ".." + number_str(hi));
  return x;
}

std::string JsonReader::get(const std::string& key, const std::string& def) {
  std::string s = def;
  read(key, s);
  return s;
}

std::string JsonReader::get_choice(const std::string& key, const std::string& def, const std::vector<std::string>& choices) {
  note(key, "string", def, true, join(choices));
  std::string s = get(key, def);
  if (std::find(choices.begin(), choices.end(), s) != choices.end()) return s;
  const std::string near = closest_match(s, choices);
  KILN_FAIL(path_of(key), " = \"", s, "\" is not accepted", near.empty() ? "" : " (did you mean \"" + near + "\"?)",
            "; accepted: ", join(choices));
}

std::vector<double> JsonReader::get_numbers(const std::string& key, const std::vector<double>& def) {
  note(key, "list of numbers", def, true);
  const json* v = lookup(key);
  if (!v) return def;
  if (!v->is_array()) fail_json_type(*v, path_of(key), "a list of numbers");
  std::vector<double> out;
  json_read(*v, path_of(key), out);
  return out;
}

std::vector<int64_t> JsonReader::get_ints(const std::string& key, const std::vector<int64_t>& def) {
  std::vector<int64_t> out = def;
  read(key, out);
  return out;
}

void JsonReader::finish() const {
  if (!j_.is_object()) return;
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (std::find(known_.begin(), known_.end(), it.key()) != known_.end()) continue;
    const std::string near = closest_match(it.key(), known_);
    KILN_FAIL("unknown key ", path_of(it.key()), near.empty() ? "" : " (did you mean " + path_of(near) + "?)",
              "; accepted keys: ", join(known_));
  }
}

void JsonReader::fail_missing(const std::string& key) const {
  // A misspelt key is the usual cause: point at it.
  if (j_.is_object())
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (closest_match(it.key(), {key}) == key)
        KILN_FAIL(path_of(key), " is required (found '", it.key(), "': did you mean '", key, "'?)");
  KILN_FAIL(path_of(key), " is required");
}

}  // namespace kiln
