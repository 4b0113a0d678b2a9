// State dicts in PyTorch's layouts, for weights that cross to or from PyTorch (safetensors files,
// torchvision checkpoints). Names are the module's (torchvision's where the architecture matches).
//   conv weights: kiln (out, kh, kw, in) <-> PyTorch OIHW (out, in, kh, kw)
// Everything else (linear weights, biases, BN tensors, num_batches_tracked) is copied as is: a
// Flatten gives PyTorch's (c, h, w) order (layers/linear.h), so a Linear after it has torchvision's
// columns. Conversion depends only on the module that owns a tensor, never on a forward pass.
//
// save_weights / load_weights put a module's weights in a safetensors file (core/io/safetensors.h)
// in the layout asked for, kiln's own or PyTorch's (WeightLayout below).
// Tests: tests/layers/interop_test.cpp, tests/layers/weights_file_test.cpp, tests/models/golden_test.cpp.
#pragma once
#include <string>

#include "layers/module.h"

namespace kiln {

// Every parameter and buffer of `m` as a new contiguous CPU tensor in PyTorch layout.
StateDict export_pytorch_state_dict(Module& m);
// Loads a PyTorch-layout state dict into `m` (strict as Module::load_state_dict; shapes in the
// error are PyTorch's).
void import_pytorch_state_dict(Module& m, const StateDict& sd, bool strict = true);

// One tensor: kiln layout -> PyTorch layout for the parameter `name` of `m`. Tensors that need no
// change are returned as given.
Tensor to_pytorch_layout(Module& m, const std::string& name, const Tensor& t);

// --- weights files ---------------------------------------------------------------------------
// How a weights file lays out the tensors. Names are the module's in both (dotted as torch.nn's).
enum class WeightLayout {
  // As the module holds them (Module::state_dict()): conv weights (out, kh, kw, in), "OHWI", the
  // layout kiln computes in (NHWC activations). Only kiln reads it back.
  kiln,
  // PyTorch's: conv weights (out, in, kh, kw), "OIHW"; everything else as in kiln. The layout of
  // kiln's checkpoints (tools/deploy/checkpoint.h); PyTorch reads it with
  // `model.load_state_dict(safetensors.torch.load_file(path))` into the same architecture.
  pytorch,
};
// "kiln" / "pytorch", as the files' metadata and the errors name them.
const char* weight_layout_name(WeightLayout layout);

// Writes every parameter and buffer of `m` to the safetensors file `path` (atomically) in `layout`;
// the file's metadata records it ("kiln.layout": "kiln" or "pytorch") with the model's type
// ("kiln.model").
void save_weights(Module& m, const std::string& path, WeightLayout layout);
// Loads the safetensors file `path`, which must hold exactly `m`'s parameters and buffers (names and
// shapes; floating tensors of any floating dtype), in `layout`. Errors name the file. A file in the
// other layout is refused with the layout to use instead when it can be told: by its "kiln.layout"
// metadata (files save_weights wrote), else (files written by PyTorch or kiln's checkpoints, which
// hold PyTorch's layout) by a conv weight whose shape fits only the other layout. A file without the
// metadata whose conv weights fit both (every conv has kh = kw = in, e.g. 3x3 on RGB input, or 1x1
// on one channel) cannot be told apart, and loads transposed.
void load_weights(Module& m, const std::string& path, WeightLayout layout);

// --- fine-tuning (train.init, docs/finetune.md) ------------------------------------------------
// The classifier head: the parameters of the model's last Linear module in registration order
// (which is the forward order of every registry model: resnet "fc", alexnet and vgg "classifier.6",
// lenet "classifier.3", a layer list its last "linear"). Empty when the model has no Linear.
std::vector<std::string> head_parameter_names(Module& m);

struct InitReport {
  std::vector<std::string> loaded;   // from the file (names and PyTorch shapes equal)
  std::vector<std::string> fresh;    // kept as the fresh model initialised them (the head, counters)
  std::vector<std::string> ignored;  // in the file, not in the model
};
// Loads the weights of a model being fine-tuned from `sd` (PyTorch layout, read from `file`): every
// tensor whose name and shape match. A head tensor (head_parameter_names) that is missing or shaped
// differently (num_classes differs) and a missing `num_batches_tracked` keep the model's fresh values;
// names in `sd` that the model lacks are ignored. Anything else (a missing backbone tensor, a shape
// that differs outside the head) is an error naming each such tensor, both shapes and `file`.
// Tensors under any of `keep_fresh` (name_under prefixes, e.g. {"fc"} for a new head of the same
// size) are not loaded: they keep their fresh values, whatever the file holds.
InitReport import_pytorch_for_finetuning(Module& m, const StateDict& sd, const std::string& file,
                                         const std::vector<std::string>& keep_fresh = {});

}  // namespace kiln
