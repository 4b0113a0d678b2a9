// Test helper: the tiny convolutional network the trainer tests run on 8x8x3 synthetic images of 4
// classes (conv 3->8, batch norm, ReLU, 2x2 max pool, flatten, linear 128->4): a model.layers array.
#pragma once
#include <nlohmann/json.hpp>

namespace kiln::testing {

inline nlohmann::json tiny_conv_layers() {
  return nlohmann::json::parse(R"([
    {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1},
    {"type": "batch_norm2d", "num_features": 8},
    {"type": "relu"},
    {"type": "max_pool2d", "kernel_size": 2},
    {"type": "flatten"},
    {"type": "linear", "in_features": 128, "out_features": 4}])");
}

}  // namespace kiln::testing
