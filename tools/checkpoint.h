// Checkpoints: `<base>.safetensors` holds the model's weights in PyTorch's layout and torchvision's
// names (safetensors.torch.load_file + model.load_state_dict reads it), and
// `<base>.state.safetensors` the training state: the optimizer's tensors plus, in its metadata, the
// epoch, step, RNG, loss scaler, best accuracy and the config as run. Both files are written to a
// temporary name, fsync'ed and renamed, state first: a crash leaves the previous checkpoint or the
// new one, and a state file whose step does not match the weights' is refused on resume.
// Tests: tests/tools/checkpoint_test.cpp.
#pragma once
#include <map>
#include <string>

#include "core/json_util.h"
#include "core/rng.h"
#include "layers/module.h"
#include "optim/optimizer.h"

namespace kiln {

struct TrainingState {
  int64_t epoch = 0;  // epochs completed
  int64_t step = 0;   // optimizer steps completed
  RngState rng;       // the default generator after `step`
  double best_top1 = -1;
  std::map<std::string, double> scaler;  // LossScaler::state_dict() (empty without fp16)
  OptimizerState optimizer;
  json config;  // the config as run
};

void save_checkpoint(const std::string& base, Module& model, const TrainingState& state);
// Loads the weights into `model` and returns the training state.
TrainingState load_checkpoint(const std::string& base, Module& model);
// Loads only weights (PyTorch layout) into `model`: FILE.safetensors, or a checkpoint base.
void load_weights(const std::string& path, Module& model);
// Accepts a run folder (-> its last checkpoint), `runs/x/last`, or `runs/x/last.safetensors`;
// returns the base path, or throws naming what is missing.
std::string resolve_checkpoint(const std::string& path);

}  // namespace kiln
