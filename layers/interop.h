// State dicts in PyTorch's layouts, for weights that cross to or from PyTorch (safetensors files,
// torchvision checkpoints). Names are the module's (torchvision's where the architecture matches).
//   conv weights: kiln (out, kh, kw, in) <-> PyTorch OIHW (out, in, kh, kw)
//   the first Linear after a Flatten of an NHWC activation (layers/linear.h): kiln's input columns
//   are in (h, w, c) order, PyTorch's in (c, h, w): the weight's columns are permuted.
// Everything else (biases, BN tensors, num_batches_tracked) is copied as is.
// Tests: tests/layers/interop_test.cpp, tests/models/golden_test.cpp.
#pragma once
#include "layers/module.h"

namespace kiln {

// Every parameter and buffer of `m` as a new contiguous CPU tensor in PyTorch layout.
StateDict export_pytorch_state_dict(Module& m);
// Loads a PyTorch-layout state dict into `m` (strict as Module::load_state_dict; shapes in the
// error are PyTorch's).
void import_pytorch_state_dict(Module& m, const StateDict& sd, bool strict = true);

// One tensor: kiln layout <-> PyTorch layout for the parameter `name` of `m`. Tensors that need no
// change are returned as given.
Tensor to_pytorch_layout(Module& m, const std::string& name, const Tensor& t);
Tensor from_pytorch_layout(Module& m, const std::string& name, const Tensor& t);

}  // namespace kiln
