// The one JSON options reader, shared by every options struct (layers, models, optimizers, schedules,
// transforms, data sources, the trainer, checkpoint metadata). An error names the JSON path, what was
// wrong and what is accepted; an unknown key suggests the closest accepted one. The typed conversions and
// messages underneath are core/json_util.h's, so every field of every config fails the same way:
//   "model.stride must be an integer, not a string \"2\""
//   "model.stride = 0 is out of range; accepted: 1..64"
//   "unknown key model.strid (did you mean model.stride?); accepted keys: ..."
//   "model.name is required"
//
// Two styles, one reader (pick per field; a null value reads as absent in both):
//   JsonReader r(j, "model");                       // j: an object (null reads as {}); path for messages
//   r.read("padding", o.padding);                   // into a field, typed: keeps the default when absent
//   r.require("size", o.size);                      // required
//   o.stride = r.get("stride", o.stride, 1, 64);    // a value, range-checked
//   o.mode = r.get_choice("mode", "fan_in", {"fan_in", "fan_out"});
//   r.finish();                                     // any key not asked for above is an error
//
// Recording (for `kiln train --help`, `kiln config keys` and the docs' key table, tools/cli/config_schema.h):
// while a KeyRecorder lives on a thread, every JsonReader on that thread also notes each key it is asked
// for: its JSON path, type, default and accepted range or choices, taken from the very get()/read()/
// get_choice() call that validates it, so the listing cannot drift from what is accepted. Reading is
// unchanged (the same values, the same errors). What is noted: get*/read/require/raw/allow, and find() of
// a key that is present (find() of an absent key only probes, e.g. for another variant's keys).
// Tests: tests/core/json_reader_test.cpp, tests/core/json_util_test.cpp.
#pragma once
#include <concepts>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/json_util.h"

namespace kiln {

using json = nlohmann::json;

// One key a reader asked for, as a KeyRecorder noted it.
struct KeyRecord {
  std::string path;      // JSON path, "train.epochs", "data.train_transforms[0].size"
  std::string type;      // "integer", "number", "boolean", "string", "list of numbers", "list of integers",
                         // "JSON" (read raw: the owner checks it), "" (allowed without being read)
  json def;              // the default (null where the reader gives none, e.g. raw reads)
  bool has_default = false;
  bool required = false;
  std::string accepted;  // "1..100000", ">= 0", "fp32, bf16" ("" where any value of the type is)
};

// While alive, collects the keys every JsonReader on this thread asks for (nested recorders: the
// innermost collects). Not copyable.
class KeyRecorder {
 public:
  KeyRecorder();
  ~KeyRecorder();
  KeyRecorder(const KeyRecorder&) = delete;
  KeyRecorder& operator=(const KeyRecorder&) = delete;
  const std::vector<KeyRecord>& keys() const { return keys_; }
  // The recorder collecting on this thread, or nullptr.
  static KeyRecorder* current();
  // Notes a key; a key noted again keeps its first record unless the new one says more (a type
  // where there was none or "JSON", accepted values where there were none).
  void note(KeyRecord rec);

 private:
  KeyRecorder* previous_;
  std::vector<KeyRecord> keys_;
};

namespace detail {
inline const char* json_kind(const bool&) { return "boolean"; }
inline const char* json_kind(const int&) { return "integer"; }
inline const char* json_kind(const int64_t&) { return "integer"; }
inline const char* json_kind(const uint64_t&) { return "integer"; }
inline const char* json_kind(const double&) { return "number"; }
inline const char* json_kind(const std::string&) { return "string"; }
inline const char* json_kind(const std::vector<double>&) { return "list of numbers"; }
inline const char* json_kind(const std::vector<int64_t>&) { return "list of integers"; }
}  // namespace detail

class JsonReader {
 public:
  // `path` is the JSON path of `j` ("" for the root, "model", "data.train_transforms[0]"). Throws if
  // `j` is neither an object nor null. The reader refers to `j`, which must outlive it.
  JsonReader(const json& j, std::string path);
  JsonReader(json&& j, std::string path) = delete;

  std::string path_of(const std::string& key) const { return json_path(path_, key); }
  const std::string& path() const { return path_; }
  // Whether `key` is present with a non-null value.
  bool has(const std::string& key) const;
  // Marks `key` as accepted (so finish() takes it) without reading it, e.g. "type".
  void allow(const std::string& key);

  // --- into a field: absent (or null) -> false and `out` unchanged; else json_read's typed conversion.
  template <typename T>
  bool read(const std::string& key, T& out) {
    if (KeyRecorder* rec = KeyRecorder::current()) rec->note({path_of(key), detail::json_kind(out), json(out), true, false, ""});
    const json* v = lookup(key);
    if (!v) return false;
    json_read(*v, path_of(key), out);
    return true;
  }
  // Like read(), but a missing key is an error naming its path (and a near-miss key that is present).
  template <typename T>
  void require(const std::string& key, T& out) {
    if (KeyRecorder* rec = KeyRecorder::current()) rec->note({path_of(key), detail::json_kind(out), json(), false, true, ""});
    if (!read(key, out)) fail_missing(key);
  }

  // --- values: absent (or null) -> `def`; wrong type or out of range -> Error naming the path.
  bool get(const std::string& key, bool def);
  int64_t get(const std::string& key, int64_t def, int64_t lo, int64_t hi);
  // Any integer type with any integer bounds (int64_t o.width with bounds 1, 4096; int with int64 bounds),
  // returned as the default's type.
  template <std::integral T, std::integral L, std::integral H>
    requires(!std::same_as<T, bool>)
  T get(const std::string& key, T def, L lo, H hi) {
    return static_cast<T>(get(key, static_cast<int64_t>(def), static_cast<int64_t>(lo), static_cast<int64_t>(hi)));
  }
  double get(const std::string& key, double def, double lo, double hi);
  std::string get(const std::string& key, const std::string& def);
  std::string get(const std::string& key, const char* def) { return get(key, std::string(def)); }
  // One of `choices` ("<path> = \"x\" is not accepted (did you mean \"y\"?); accepted: ...").
  std::string get_choice(const std::string& key, const std::string& def, const std::vector<std::string>& choices);
  std::vector<double> get_numbers(const std::string& key, const std::vector<double>& def);
  std::vector<int64_t> get_ints(const std::string& key, const std::vector<int64_t>& def);

  // --- raw values (each marks `key` accepted):
  // the value, or nullptr when absent or null;
  const json* find(const std::string& key);
  // the value, or a null json when absent;
  const json& raw(const std::string& key);
  // the value; absent -> Error.
  const json& require(const std::string& key);

  // Throws for the first key that no read/require/get/find/raw/allow asked for.
  void finish() const;

 private:
  // Marks `key` accepted; its value, or nullptr when absent or null. Notes nothing.
  const json* lookup(const std::string& key);
  void note(const std::string& key, const char* type, json def, bool has_default, std::string accepted = "",
            bool required = false) const;
  [[noreturn]] void fail_missing(const std::string& key) const;
  const json& j_;
  std::string path_;
  std::vector<std::string> known_;  // in the order asked, for the "accepted:" list
};

}  // namespace kiln
