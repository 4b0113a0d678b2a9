// A trained model ready for inference, from its config and its weights: the library's short path for
// programs that classify with a model kiln trained (examples/classify.cpp, docs/library.md), and the
// one place the commands that take RUN|CONFIG (`kiln eval`, `kiln predict`, `kiln export`) resolve it
// and build their model. Tests: tests/deploy/model_io_test.cpp.
#pragma once
#include <memory>
#include <string>

#include "core/json_reader.h"
#include "layers/module.h"

namespace kiln {

// A run folder: a folder holding config.json (training writes it before the first step; its weights
// are the run's checkpoints, tools/deploy/checkpoint.h).
bool is_run_folder(const std::string& path);

// A command's RUN|CONFIG argument, resolved: a run folder (its config.json is the config) or a config file.
struct RunOrConfig {
  std::string config_file;  // the config to read
  std::string run_dir;      // the run folder; empty when `arg` is a config file
  bool is_run() const { return !run_dir.empty(); }
};
// `command` names the caller in errors ("kiln predict"); a folder without config.json is refused.
RunOrConfig resolve_run_or_config(const std::string& command, const std::string& arg);

// Builds config["model"] (models/registry.h); runs the check the trainer makes before a run
// (tools/deploy/model_check.h: two zero images of the shape config["data"]'s validation transforms give,
// through the model: it takes them and gives a score per class); loads `weights` (a .safetensors
// file or a run folder, tools/deploy/checkpoint.h: load_weights); and returns the model in eval mode, on
// the CPU.
// Errors name the config key or the weights file.
std::shared_ptr<Module> load_model(const json& config, const std::string& weights);
// The same model with its initial weights, drawn after seeding with config["train"]["seed"] (default
// 0): what `kiln export init=random` exports.
std::shared_ptr<Module> initial_model(const json& config);

}  // namespace kiln
