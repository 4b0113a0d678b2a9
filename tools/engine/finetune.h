// Fine-tuning's part of the trainer (docs/finetune.md): train.init (with train.init_fresh) and
// train.freeze. Tests: tests/engine/finetune_test.cpp.
#pragma once
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "tools/engine/train_options.h"
#include "layers/module.h"
#include "optim/param.h"

namespace kiln {

// train.init: loads `init` (a safetensors file, a checkpoint or a run folder: its best checkpoint, else
// its last) into the fresh `model`, leaving the tensors under `fresh` (train.init_fresh) as they are,
// and says what was loaded, new and ignored when `show`.
void load_init_weights(Module& model, const std::string& init, const std::vector<std::string>& fresh, bool show);

// train.freeze's word for everything but the classifier head (head_parameter_names(), layers/interop.h:
// the parameters of the model's last Linear module, fc.* for the ResNets, classifier.6.* for AlexNet and
// VGG, classifier.3.* for LeNet).
inline constexpr const char* kBackbone = "backbone";

// `prefixes` with the entry "backbone" replaced by the name of every parameter outside the head; an
// error naming the model when it has no Linear module (no head to leave out).
std::vector<std::string> expand_backbone(Module& model, const std::vector<std::string>& prefixes);

// train.freeze: freezes the parameters under `freeze_prefixes` (after expand_backbone) and returns
// those the optimizer updates; with `show`, one line: the frozen and trained parameters (scalars) and
// tensors.
std::vector<ParamRef> trainable_params(Module& model, const std::vector<std::string>& freeze_prefixes, bool show);

}  // namespace kiln
