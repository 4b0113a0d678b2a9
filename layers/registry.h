// The layer registry: config type names -> constructors, one line per type in registry.cpp
// (explicit on purpose: static self-registration silently vanishes from static libraries).
//   {"type": "conv2d", "in_channels": 3, "out_channels": 16, "kernel_size": 3, "padding": 1}
//   {"type": "sequential", "layers": [ {...}, {...} ]}
// Tests: tests/layers/registry_test.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"
#include "layers/sequential.h"

namespace kiln {

// Builds one layer; `path` is its JSON path for messages ("model.layers[2]"). An unknown type names
// the closest registered type; a bad option names its JSON path.
std::shared_ptr<Module> build_layer(const json& j, const std::string& path);
// Builds a Sequential from a JSON array of layers (each built by build_layer, path "<path>[i]").
std::shared_ptr<Sequential> build_sequential(const json& layers, const std::string& path);
// Registered type names, in registry order.
std::vector<std::string> layer_types();

}  // namespace kiln
