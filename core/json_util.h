// Strict JSON option parsing shared by every options struct (layers, models, optimizers,
// transforms, the trainer). A config error names the JSON path, what was wrong and what is
// accepted; an unknown key suggests the closest valid one.
//
//   JsonReader r(j, "model");                 // path prefix for messages
//   opts.stride = r.get("stride", opts.stride, 1, 64);   // default kept when absent; range-checked
//   r.finish();                               // any key not read -> "model.strid: unknown key ..."
#pragma once
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/json_read.h"

namespace kiln {

using json = nlohmann::json;

class JsonReader {
 public:
  // `path` is the JSON path of `j` ("" for the root, "model", "data.train_transforms[0]").
  JsonReader(const json& j, std::string path);

  std::string path_of(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const;
  // Marks `key` as known (so finish() accepts it) without reading it.
  void allow(const std::string& key) { known_.insert(key); }

  // Typed getters: absent -> `def`; wrong type or out of range -> Error naming the path.
  bool get(const std::string& key, bool def);
  int64_t get(const std::string& key, int64_t def, int64_t lo, int64_t hi);
  int get(const std::string& key, int def, int lo, int hi) {
    return static_cast<int>(get(key, static_cast<int64_t>(def), static_cast<int64_t>(lo), static_cast<int64_t>(hi)));
  }
  double get(const std::string& key, double def, double lo, double hi);
  std::string get(const std::string& key, const std::string& def);
  std::string get(const std::string& key, const char* def) { return get(key, std::string(def)); }
  // One of `choices`.
  std::string get_choice(const std::string& key, const std::string& def, const std::vector<std::string>& choices);
  std::vector<double> get_numbers(const std::string& key, const std::vector<double>& def);
  std::vector<int64_t> get_ints(const std::string& key, const std::vector<int64_t>& def);
  // Required key: absent -> Error.
  const json& require(const std::string& key);
  // The raw value (or null when absent); marks it known.
  const json& raw(const std::string& key);

  // Throws for the first key that was never read or allowed, suggesting the closest known key.
  void finish() const;

 private:
  const json& j_;
  std::string path_;
  std::set<std::string> known_;
};

}  // namespace kiln
