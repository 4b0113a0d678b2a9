// The training state of checkpoints written before kiln's Flatten gave PyTorch's (c, h, w) order.
//
// Then, Flatten turned an NHWC activation (N, H, W, C) into (N, H*W*C) columns in (h, w, c) order,
// and a Linear that a Flatten fed directly (only ReLU/Dropout between, in one Sequential or layer
// list; the classifier's first Linear in LeNet/AlexNet/VGG) kept its weight's columns in that order
// inside kiln. The weights and EMA files were written in PyTorch's layout all the same (those
// columns permuted to (c, h, w) on save), so they load unchanged today; but the training state
// (`*.state.safetensors`) holds the optimizer's tensors ("<linear>.weight.momentum_buffer",
// ".exp_avg", ...) as kiln kept them, in (h, w, c) order. A state written since carries
// "flatten_order": "chw" in its kiln_training_state metadata (tools/engine/training_checkpoint.cpp);
// load_checkpoint converts a state without it here, and refuses one it cannot convert, naming the file.
// Tests: tests/engine/checkpoint_test.cpp (LegacyFlattenOrder*).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "layers/module.h"

namespace kiln {

// The value of "flatten_order" in a state written with the (c, h, w) Flatten.
inline constexpr const char* kFlattenOrderChw = "chw";

// Permutes, in place, the optimizer tensors of a state written with the (h, w, c) Flatten: for each
// Linear of `model` that such a Flatten fed, its "<linear>.weight.<slot>" tensors (out, H*W*C) go
// from (h, w, c) to (c, h, w) columns. C is found from the layers before the Flatten (the conv,
// batch norm or residual block that last set the channels); `image_channels` (0 if unknown) is used
// when the Flatten sees the model's input images. Throws, naming `file`, when a Linear's C cannot be
// found, or when the layer after such a Flatten is neither a Linear, ReLU nor Dropout (the earlier
// kiln wrote that model's files in its own order, not PyTorch's: they cannot be converted).
void convert_legacy_optimizer_state(Module& model, std::map<std::string, Tensor>& tensors, int64_t image_channels,
                                    const std::string& file);

}  // namespace kiln
