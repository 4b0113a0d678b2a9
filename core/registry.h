// Registry<Maker>: the one shape of every "name in a config -> what builds it" table: layers, models,
// optimizers, learning-rate schedules, transforms, data sources and losses. kiln's own components are
// added by their family's registry.cpp, one line per name, when the registry is first used; a user's
// program adds its own through the same registry (register_model(), register_layer(), ... next to each
// family; or the KILN_REGISTER one-liner below), so a registered component is looked up, read,
// validated, documented (`kiln train --help`, `kiln config keys`) and reported exactly like a built-in.
//
//   Registry<LayerMaker>& r = ...;                        // a family's, e.g. layers/registry.cpp
//   r.add("conv2d", make_conv, {.sample = {...}, .structs = {"Conv2dOptions"}});
//   r.lookup(j, path, "type")(j, path);                   // j["type"] names the entry
//
// Every family reports an unknown name the same way:
//   config: model.layers[2].type = "maxpool2d" is not a layer type (did you mean "max_pool2d"?); accepted: ...
// and a name added twice names both places ("... is registered twice: at a.cpp:12 and at b.cpp:40").
//
// Registration survives static linking (docs/library.md, "Registering your components"): kiln's own
// components are added by the registry's accessor itself, never by static objects; a user's KILN_REGISTER
// object lives in the user's own object file, which the linker keeps when it is linked directly into the
// executable, but drops from a static library unless something there is referenced (call a function of
// that file from main, or link the library whole: CMake's $<LINK_LIBRARY:WHOLE_ARCHIVE,lib>).
// Registration is single-threaded (static initialisation, or main before training); lookups may then
// run on any thread. Tests: tests/core/registry_test.cpp, tests/cli/registration_test.cpp.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/json_util.h"

namespace kiln {

// What the config schema (tools/cli/config_schema.h) knows of a component, to list its keys with their
// meanings. Its keys themselves (types, defaults, ranges, choices) come from its reader, run over `sample`.
struct ComponentDocs {
  // One line: what the component is ("the CIFAR ResNet of He et al. 2016, 6n+2 layers").
  std::string summary;
  // The options (beside its name) without which its reader refuses it, with valid values:
  // {"in_channels": 1, "out_channels": 1, "kernel_size": 1} for conv2d; {} when none are required.
  Json sample = Json::object();
  // The options structs whose `///` field comments are the keys' meanings (kiln's own components:
  // kiln_docgen reads kiln's headers, tools/cli/docgen).
  std::vector<std::string> structs;
  // Meanings given in code, {key, meaning} (a user's component, whose headers kiln_docgen does not read);
  // they win over `structs`.
  std::vector<std::pair<std::string, std::string>> keys;
};

// Where a registration is written: its caller's file and line, as std::source_location::current()
// gives them (a default argument evaluated at the call site). Not std::source_location itself: clang 14
// (Debian 12's, the sanitizer build's compiler) lacks the builtin libstdc++'s needs.
class SourcePlace {
 public:
  static constexpr SourcePlace current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return SourcePlace(file, line);
  }
  constexpr const char* file_name() const { return file_; }
  constexpr unsigned line() const { return line_; }

 private:
  constexpr SourcePlace(const char* file, unsigned line) : file_(file), line_(line) {}
  const char* file_;
  unsigned line_;
};

// Where a component was registered: "models/registry.cpp:31", or the user's file and line.
std::string place_text(const SourcePlace& where);

// Failures of KILN_REGISTER objects during static initialisation (a name registered twice, an empty
// name): they cannot throw there, so they are kept and thrown by check_registrations(), which every
// registry lookup, kiln::cli::main and kiln::train call first.
void note_registration_failure(const std::string& what);
void check_registrations();

// Runs `add` (a registration) at static initialisation, keeping what it throws for check_registrations().
struct Registration {
  explicit Registration(void (*add)()) noexcept;
};

template <class Maker>
class Registry {
 public:
  struct Entry {
    std::string name;
    Maker make;
    ComponentDocs docs;
    std::string place;  // where it was registered (place_text)
  };

  // `what` completes "is not ..." in errors ("a layer type", "a model"); "" gives "is not accepted".
  // `extra` is appended to the accepted list (", or a \"layers\" list").
  explicit Registry(std::string what, std::string extra = "") : what_(std::move(what)), extra_(std::move(extra)) {}
  // A fixed table (no documentation, no places), e.g. a test's or a private one.
  Registry(std::string what, std::vector<std::pair<std::string, Maker>> entries, std::string extra = "")
      : Registry(std::move(what), std::move(extra)) {
    for (auto& [name, make] : entries) add(name, std::move(make));
  }

  // Adds `name`. Throws for an empty name, or one already registered (naming both places).
  void add(const std::string& name, Maker make, ComponentDocs docs = {},
           const SourcePlace& where = SourcePlace::current()) {
    const std::string place = place_text(where);
    KILN_CHECK(!name.empty(), "registering ", what_.empty() ? "a component" : what_, " at ", place, ": the name is empty");
    if (const Entry* e = entry(name))
      KILN_FAIL(what_.empty() ? "\"" + name + "\"" : what_ + " \"" + name + "\"", " is registered twice: at ", e->place,
                " and at ", place, "; rename one");
    entries_.push_back({name, std::move(make), std::move(docs), place});
  }

  // The names, in registry order (kiln's own first, then the user's in registration order).
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const Entry& e : entries_) n.push_back(e.name);
    return n;
  }
  const std::vector<Entry>& entries() const { return entries_; }
  // The entry of `name`, or nullptr.
  const Entry* entry(const std::string& name) const {
    for (const Entry& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  // The maker of `name`, or nullptr.
  const Maker* find(const std::string& name) const {
    const Entry* e = entry(name);
    return e ? &e->make : nullptr;
  }
  // The maker of `name`; otherwise an Error naming `key_path` (e.g. "model.name"), the closest name and
  // every accepted one (and, with no close name, where a component of the user's own would come from).
  const Maker& at(const std::string& name, const std::string& key_path) const {
    check_registrations();
    if (const Maker* m = find(name)) return *m;
    const std::string near = closest_match(name, names());
    KILN_FAIL("config: ", key_path, " = \"", name, "\" is not ", what_.empty() ? "accepted" : what_,
              near.empty() ? "" : " (did you mean \"" + near + "\"?)", "; accepted: ", join(names()), extra_,
              near.empty() ? std::string(kUnlinkedHint) : "");
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

  // The hint of an unknown name that is close to none: a component of the user's own is missing when
  // its registration was not linked.
  static constexpr const char* kUnlinkedHint =
      " (a component registered in your own code is missing when its object file is not linked in: "
      "docs/library.md, \"Registering your components\")";

 private:
  std::string what_, extra_;
  std::vector<Entry> entries_;
};

// Calls `make` (the maker of the component `name`, picked by `selector`, for the config object at `path`);
// an exception it throws that does not name `path` already (as kiln's readers' errors do) is rethrown
// naming the component and the config key:
//   config: model (name "tiny_cnn", registered at net.cpp:12): <what it threw>
template <class F>
decltype(auto) call_component(const std::string& path, const std::string& selector, const std::string& name,
                              const std::string& place, F&& make) {
  try {
    return make();
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const bool named = what.find(path + ".") != std::string::npos || what.find(path + "[") != std::string::npos ||
                       what.rfind(path + " ", 0) == 0 || what.rfind("config: " + path + " ", 0) == 0;
    if (named) throw;
    KILN_FAIL("config: ", path, " (", selector, " \"", name, "\"", place.empty() ? "" : ", registered at " + place,
              "): ", what);
  }
}

}  // namespace kiln

// One line next to a component's definition, at namespace scope in the user's own .cpp:
//   KILN_REGISTER(kiln::register_model("tiny_cnn", make_tiny_cnn, {.summary = "..."}));
// runs the registration at static initialisation (core/registry.h's note on static libraries applies).
#define KILN_REGISTER_CAT2(a, b) a##b
#define KILN_REGISTER_CAT(a, b) KILN_REGISTER_CAT2(a, b)
#define KILN_REGISTER(...)                                                                          \
  [[maybe_unused]] static const ::kiln::Registration KILN_REGISTER_CAT(kiln_registration_, __LINE__)( \
      [] { __VA_ARGS__; })
