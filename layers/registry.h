// The layer registry: config type names -> constructors (core/registry.h). kiln's layers are one line
// each in registry.cpp; a program adds its own with register_layer() (or KILN_REGISTER), and they are
// then usable in any {"layers": [...]} list, documented by `kiln train --help` like kiln's own.
//   {"type": "conv2d", "in_channels": 3, "out_channels": 16, "kernel_size": 3, "padding": 1}
//   {"type": "sequential", "layers": [ {...}, {...} ]}
// Tests: tests/layers/registry_test.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/registry.h"
#include "layers/module.h"
#include "layers/sequential.h"

namespace kiln {

// Builds a layer from its options object (the JSON object with "type"); `path` names it in errors
// ("model.layers[2]"). Read the options with JsonReader (core/json_reader.h) and finish() it, so a
// misspelt key is refused naming its path, as for kiln's layers.
using LayerFactory = std::function<std::shared_ptr<Module>(const json& options, const std::string& path)>;
// The registry itself (kiln's layers first).
Registry<LayerFactory>& layer_registry();
// Adds a layer type; throws if `type` is taken (naming both places). `docs`: what `--help` says of it.
void register_layer(const std::string& type, LayerFactory make, ComponentDocs docs = {},
                    const SourcePlace& where = SourcePlace::current());

// Builds one layer; `path` is its JSON path for messages ("model.layers[2]"). An unknown type names
// the closest registered type; a bad option names its JSON path.
std::shared_ptr<Module> build_layer(const json& j, const std::string& path);
// Builds a Sequential from a JSON array of layers (each built by build_layer, path "<path>[i]").
std::shared_ptr<Sequential> build_sequential(const json& layers, const std::string& path);
// Registered type names, in registry order.
std::vector<std::string> layer_types();

}  // namespace kiln
