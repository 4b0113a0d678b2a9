// A trained model ready for inference, from its config and its weights: the library's short path for
// programs that classify with a model kiln trained (examples/classify.cpp, docs/library.md).
// Tests: tests/tools/model_io_test.cpp.
#pragma once
#include <memory>
#include <string>

#include "core/json_util.h"
#include "layers/module.h"

namespace kiln {

// Builds config["model"] (models/registry.h); runs the check the trainer makes before a run
// (tools/model_check.h: two zero images of the shape config["data"]'s validation transforms give,
// through the model, which also tells a flatten its input shape, needed to read a following linear
// layer's weights in PyTorch layout); loads `weights` (a .safetensors file or a run folder,
// tools/checkpoint.h: load_weights); and returns the model in eval mode, on the CPU.
// Errors name the config key or the weights file.
std::shared_ptr<Module> load_model(const json& config, const std::string& weights);

}  // namespace kiln
