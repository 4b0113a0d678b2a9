// key=value command-line arguments, read one way by every command (before, five commands each
// had a hand-written loop, with drifting error messages):
//
//   KeyValueArgs a("bench train", args, {{"model", "resnet50"}, {"batch", "128"}});
//   a.str("model"); a.integer("batch", 1);
//
// Each argument must be key=value (the value may be empty and may hold '='), without dashes ("--batch=8" is
// refused: "did you mean batch=8?", dashed_argument_problem in tools/deploy/config.h). A key of the command
// (one of `defaults`) sets its value (the last one wins); any other key is an error that lists the
// accepted keys, unless the command takes config overrides (Mode::overrides), which are then kept,
// in order, for apply_overrides (tools/deploy/config.h). Errors are one line, naming the command and the
// argument. Tests: tests/cli/kv_args_test.cpp.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::cli {

class KeyValueArgs {
 public:
  enum class Mode { own_keys_only, overrides };
  KeyValueArgs(std::string cmd, const std::vector<std::string>& args, std::map<std::string, std::string> defaults,
               Mode mode = Mode::own_keys_only);

  const std::string& str(const std::string& key) const;
  // The value as a whole number >= `min`, else "<cmd>: '<key>=<value>': <key> takes a whole number >= <min>".
  int64_t integer(const std::string& key, int64_t min) const;
  // Whether the arguments set `key` (rather than its default).
  bool given(const std::string& key) const { return given_.count(key) != 0; }
  // The arguments that were not the command's keys (Mode::overrides), in order.
  const std::vector<std::string>& overrides() const { return overrides_; }
  // "a, b, c": the command's keys.
  std::string accepted() const;

 private:
  std::string cmd_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> given_;
  std::vector<std::string> overrides_;
};

}  // namespace kiln::cli
