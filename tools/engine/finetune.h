// Fine-tuning's part of the trainer (docs/finetune.md): train.init (with train.init_fresh) and
// train.freeze. Tests: tests/engine/finetune_test.cpp.
#pragma once
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "tools/deploy/train_options.h"
#include "layers/module.h"
#include "optim/param.h"

namespace kiln {

// train.init: loads `init` (a safetensors file, a checkpoint or a run folder: its best checkpoint, else
// its last) into the fresh `model`, leaving the tensors under `fresh` (train.init_fresh) as they are,
// and says what was loaded, new and ignored when `show`.
void load_init_weights(Module& model, const std::string& init, const std::vector<std::string>& fresh, bool show);

// train.freeze: freezes the parameters under `freeze_prefixes` and returns those the optimizer updates.
std::vector<ParamRef> trainable_params(Module& model, const std::vector<std::string>& freeze_prefixes, bool show);

}  // namespace kiln
