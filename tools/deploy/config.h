// Run configuration: a JSON file plus `key=value` overrides from the command line.
//
//   kiln train configs/x.json device=0,1 batch=-1 optim.lr=0.05
//
// Overrides take dotted JSON paths (`optim.lr=0.05`, `data.train_transforms.0.p=0.3` indexes an
// array) and short forms: epochs, batch, device, lr, precision, workers, seed, resume, name
// (see kShortForms in config.cpp). A value is parsed as JSON when it is valid JSON (numbers,
// true/false, [..]) and taken as a string otherwise (`device=0,1`); a key that takes a string (the
// short forms device, precision, resume, name, checkpoint, weights, model, or a key the file holds
// as a string) keeps the text as typed (`device=0`, `device=[0,1]`, `name=2024`). The sections are
// validated by their owners (model, data, optim, schedule, train) with errors naming the JSON path.
//
// JSON is read strictly (parse_config_text): a key twice in one object, a list longer than
// kMaxConfigListLength, nesting deeper than kMaxConfigDepth or a number beyond a double is refused
// naming the file (or argument) and the JSON path.
// Tests: tests/engine/config_test.cpp.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/json_reader.h"

namespace kiln {

// No config key takes a list longer than this, or nests deeper; longer lists are refused while
// parsing, which keeps reading a config's memory in proportion to the file.
constexpr size_t kMaxConfigListLength = 10000;
constexpr size_t kMaxConfigDepth = 64;

// Parses JSON text (comments allowed) with the checks above; errors start with `source` ("config
// file 'x.json'", "argument 'lr=1e400'"). With `syntax_error`, text that is not JSON sets it and
// returns null instead of throwing (the other errors still throw).
json parse_config_text(const std::string& text, const std::string& source, bool* syntax_error = nullptr);

// Reads and parses `path`; errors name the file (and the line/column of a JSON syntax error).
json load_config_file(const std::string& path);

// Applies each `key=value` to `config`; errors name the argument and what is accepted. Before anything is
// applied, an argument with dashes is refused (dashed_argument_problem), and so is a key without a dot that
// is not a short form but close to one: "argument 'epohcs=1': unknown key epohcs (did you mean epochs
// (train.epochs)?); short forms: ...; any other key by its dotted path, e.g. train.epochs=3".
void apply_overrides(json& config, const std::vector<std::string>& overrides);

// What is wrong with a command-line argument that starts with a dash followed by a letter, "" for any other:
// "argument '--epochs=1': did you mean epochs=1? kiln takes key=value without dashes" (also "-lr=0.1",
// "--train.epochs=3"; "--epochs" alone: epochs=VALUE; "--help" after the command: where help goes).
// apply_overrides and every command's key=value arguments (tools/cli/kv_args.h) refuse such an argument.
std::string dashed_argument_problem(const std::string& arg);

// The one reading of a `key=value` argument (config overrides and every command's own keys, tools/cli/kv_args.h):
// the key before the first '=' and the value after it (which may be empty and may hold '='); nullopt when
// the argument holds no '=' or the key is empty.
struct KeyValue {
  std::string key, value;
};
std::optional<KeyValue> split_key_value(const std::string& arg);

// The long path a short form stands for ("lr" -> "optim.lr"), or the key itself.
std::string expand_short_form(const std::string& key);

}  // namespace kiln
