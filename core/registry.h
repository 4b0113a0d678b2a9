// Registry<Maker>: the one shape of every "name in a config -> what builds it" table (layers, models,
// optimizers, learning-rate schedules, transforms). Each family lists its entries explicitly, one line
// per name, in one file (static self-registration silently vanishes from static libraries), and every
// family reports an unknown name the same way:
//
//   config: model.layers[2].type = "maxpool2d" is not a layer type (did you mean "max_pool2d"?); accepted: ...
//
//   static const Registry<LayerMaker> r("a layer type", {{"conv2d", make_conv}, {"relu", make_relu}});
//   r.lookup(j, path, "type")(j, path);   // j["type"] names the entry
//
// Tests: tests/core/registry_test.cpp.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/json_util.h"

namespace kiln {

template <class Maker>
class Registry {
 public:
  // `what` completes "is not ..." in errors ("a layer type", "a model"); "" gives "is not accepted".
  // `extra` is appended to the accepted list (", or a \"layers\" list").
  Registry(std::string what, std::vector<std::pair<std::string, Maker>> entries, std::string extra = "")
      : what_(std::move(what)), extra_(std::move(extra)), entries_(std::move(entries)) {}

  // The names, in registry order.
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& e : entries_) n.push_back(e.first);
    return n;
  }
  // The maker of `name`, or nullptr.
  const Maker* find(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.first == name) return &e.second;
    return nullptr;
  }
  // The maker of `name`; otherwise an Error naming `key_path` (e.g. "model.name"), the closest name and
  // every accepted one.
  const Maker& at(const std::string& name, const std::string& key_path) const {
    if (const Maker* m = find(name)) return *m;
    const std::string near = closest_match(name, names());
    KILN_FAIL("config: ", key_path, " = \"", name, "\" is not ", what_.empty() ? "accepted" : what_,
              near.empty() ? "" : " (did you mean \"" + near + "\"?)", "; accepted: ", join(names()), extra_);
  }
  // The maker named by the string j[key] of the object j at `path`: errors for a missing or
  // non-string key name "<path>.<key>" and what is accepted.
  const Maker& lookup(const Json& j, const std::string& path, const std::string& key) const {
    const std::string key_path = json_path(path, key);
    KILN_CHECK(j.is_object(), "config: ", path, " must be an object with \"", key, "\", not ", json_type_name(j), " ",
               j.dump());
    KILN_CHECK(j.contains(key), "config: ", key_path, " is required; accepted: ", join(names()), extra_);
    KILN_CHECK(j[key].is_string(), "config: ", key_path, " must be a string, not ", json_type_name(j[key]));
    return at(j[key].template get<std::string>(), key_path);
  }

 private:
  std::string what_, extra_;
  std::vector<std::pair<std::string, Maker>> entries_;
};

}  // namespace kiln
