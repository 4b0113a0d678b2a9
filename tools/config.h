// Run configuration: a JSON file plus `key=value` overrides from the command line.
//
//   kiln train configs/x.json device=0,1 batch=-1 optim.lr=0.05
//
// Overrides take dotted JSON paths (`optim.lr=0.05`, `data.train_transforms.0.p=0.3` indexes an
// array) and short forms: epochs, batch, device, lr, precision, workers, seed, resume, name
// (see kShortForms in config.cpp). A value is parsed as JSON when it is valid JSON (numbers,
// true/false, [..]) and taken as a string otherwise (`device=0,1`). The sections are validated by
// their owners (model, data, optim, schedule, train) with errors naming the JSON path.
// Tests: tests/tools/config_test.cpp.
#pragma once
#include <string>
#include <vector>

#include "core/json_util.h"

namespace kiln {

// Reads and parses `path`; errors name the file (and the line/column of a JSON syntax error).
json load_config_file(const std::string& path);

// Applies each `key=value` to `config`; errors name the argument and what is accepted.
void apply_overrides(json& config, const std::vector<std::string>& overrides);

// The long path a short form stands for ("lr" -> "optim.lr"), or the key itself.
std::string expand_short_form(const std::string& key);

}  // namespace kiln
