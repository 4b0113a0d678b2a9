// ONNX export of a kiln model (`kiln export format=onnx`, tools/cli/export_cmd.cpp; docs/export.md).
// The graph is built with libonnx (Debian's libonnx-dev, linked into kiln_onnx only) from kiln's
// module tree, walked layer by layer:
//   Sequential, the models of models/ (ResNet, LeNet/AlexNet/VGG's features -> [avgpool] -> flatten
//   -> classifier, a "layers" list), Conv2d, BatchNorm2d (2-D and 4-D inputs), ReLU, Dropout (no node:
//   identity in eval), MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, GlobalAvgPool, Flatten, Linear,
//   LocalResponseNorm (odd sizes), BasicBlock and Bottleneck (shortcut A or B, Add).
// Any other module is refused naming its path and type. The graph takes NCHW float input
// "input" (batch, C, H, W) with a dynamic batch ("batch") and gives "logits" (batch, classes); opset
// 13. Weights are initializers named as the state dict, in PyTorch's layout (layers/interop.h), so
// the NCHW graph computes what kiln computes on NHWC (kiln's Flatten gives the (c, h, w) order that
// ONNX Flatten of the NCHW value gives, so it is one Flatten node); num_batches_tracked is not exported (the graph
// does not use it). The model is checked with onnx::checker::check_model and strict shape inference
// (which must give the declared output shape) before it is returned.
// Tests: tests/onnx/onnx_export_test.cpp; numerics: tools/bench/onnx_compare.py.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "layers/module.h"

namespace kiln {

constexpr int64_t kOnnxOpset = 13;

struct OnnxExportOptions {
  int64_t channels = 0, height = 0, width = 0;  // the input image (required)
  std::string graph_name = "kiln";             // the graph's name (the model's name)
  std::map<std::string, std::string> metadata;  // metadata_props of the model
};

// The serialized ModelProto of `model` (evaluated as in eval mode; the module's mode is not changed).
// Throws kiln::Error for an unsupported layer (naming its path and type), an input size the model
// cannot take, or a model the checker or shape inference rejects.
std::string export_onnx(Module& model, const OnnxExportOptions& o);

}  // namespace kiln
