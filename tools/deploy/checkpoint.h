// Checkpoint files: the layout of a checkpoint on disk, its atomic write, and the reading of its weights
// (what predict, eval, export and train.init need). What the training state holds and how it is
// checked is the engine's (tools/engine/training_checkpoint.h: save_checkpoint, load_checkpoint), so
// that a program that loads a run's weights links no optimizer library.
// A checkpoint named `<run>/last` is a folder holding a pair of files:
//   `last.safetensors`        the model's weights in PyTorch's layout and torchvision's names
//                             (safetensors.torch.load_file + model.load_state_dict reads it);
//   `last.state.safetensors`  the training state: the optimizer's tensors (in kiln's layout: conv
//                             state (out, kh, kw, in)) plus, in its metadata, the epoch, step, RNG,
//                             loss scaler, the best validation figure (train.best_metric's) and
//                             train.early_stopping's record, the config as run, a mid-epoch save's
//                             position and figures (epoch_step, progress), the kiln_version that
//                             wrote it and "flatten_order":
//                             "chw" (a state without it, from an earlier kiln, has a flattened
//                             Linear's tensors in (h, w, c) column order: converted on load,
//                             tools/engine/checkpoint_legacy.h).
//   `last.ema.safetensors`    with train.ema: the EMA of the weights (tools/engine/train_ema.h), same layout
//                             and names as the weights file (docs/ema_accumulate.md).
// On disk (one save of step 12):
//   <run>/last-12/last.safetensors, last-12/last.state.safetensors   the pair
//   <run>/last -> last-12                                           the one switch (a symlink)
//   <run>/last.safetensors -> last/last.safetensors                 fixed links, for readers of
//   <run>/last.state.safetensors -> last/last.state.safetensors     the older flat layout
//   <run>/last.ema.safetensors -> last/last.ema.safetensors         with train.ema
// A save writes both files into a new folder `<run>/ckpt.tmp-XXXXXX/`, fsyncs them, renames the
// folder to `last-<step>` and then switches `last` to it with one rename of a symlink: a kill at any
// moment leaves `last` naming a complete pair (the previous one or the new one). The previous folder
// and any temporaries a killed save left behind are removed by the save (and the next one).
// Loading refuses a pair from different steps, non-finite tensors (weights, batch-norm buffers,
// optimizer state) and integer tensors for floating parameters, naming the file and the tensor (and
// the engine's load_checkpoint a state with a missing or out-of-range field). Flat pairs
// (`<base>.safetensors` + `<base>.state.safetensors`, written by earlier kiln) still load.
// Tests: tests/deploy/run_weights_test.cpp (which checkpoint a run folder stands for, the pair's write),
// tests/engine/checkpoint_test.cpp (validation, layout), tests/engine/checkpoint_kill_test.cpp (kill -9
// during saves, then resume), tests/engine/trainer_test.cpp (exact resume).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/io/safetensors.h"
#include "core/json_reader.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace kiln {

// What one pair holds, as the engine's save_checkpoint hands it to write_checkpoint_pair.
struct CheckpointPair {
  int64_t step = 0;              // the optimizer steps of the run (each file's metadata "step"; the folder's name)
  Module* model = nullptr;       // its weights, saved in PyTorch's layout (required)
  Module* ema = nullptr;         // the EMA of the weights (train.ema), or none
  json model_config;             // the config's "model" section: each weights file's metadata "kiln_model"
  std::map<std::string, Tensor> state_tensors;  // the training state's tensors (the optimizer's)
  json state;                    // the training state: the state file's metadata "kiln_training_state"
};
// Writes `pair` as checkpoint `base` (`<run>/last`: the folder layout above): both files (and the
// EMA's) into a new folder, then the one switch of the link. `keep`: how many pair folders of `base`
// stay, the newest by step (train.keep_last; `base` names the new one); older ones are removed after
// the switch.
void write_checkpoint_pair(const std::string& base, const CheckpointPair& pair, int64_t keep = 1);

// Loads only weights (PyTorch layout) into `model`: FILE.safetensors, a checkpoint, or a run folder
// (the weights it stands for: run_weights_checkpoint).
void load_weights(const std::string& path, Module& model);
// Loads the weights file `file` of checkpoint `base` into `m`, checked: written at `step` (that of the
// training state `state_file`; else the pair is from two saves), finite, fitting the model. `what`
// names it in errors ("weights", "EMA weights").
void load_pair_weights(const std::string& base, const std::string& file, const std::string& state_file, int64_t step,
                       Module& m, const char* what);
// The "step" metadata entry of a checkpoint file `file` (its contents `c`), checked to be a count.
int64_t checkpoint_file_step(const SafetensorsContents& c, const std::string& file);
// Refuses NaN/inf in any floating tensor of `file`, naming `what` ("weights", "checkpoint"), the file,
// the tensor and the first bad element.
void check_finite_tensors(const std::map<std::string, Tensor>& tensors, const std::string& file, const char* what);

// The one rule for what a run folder `runs/x` stands for (docs/training.md, "Which checkpoint"):
//   - weights (kiln eval, predict, export, train.init, load_model): its best checkpoint when it has
//     one (the best validation top-1), else its last; name runs/x/last to take the last;
//   - training state (resume=, kiln train runs/x): its last checkpoint (resolve_checkpoint).
// A path that is not a run folder is resolve_checkpoint's.
std::string run_weights_checkpoint(const std::string& path);
// Accepts a run folder (-> its last checkpoint), `runs/x/last`, `runs/x/last.safetensors`,
// `runs/x/last.state.safetensors`, a checkpoint folder `runs/x/last-12` or a file inside it; returns
// the checkpoint (its parent is the run folder), or throws naming what is missing.
std::string resolve_checkpoint(const std::string& path);
// The pair folder the checkpoint `base` names: runs/x/last (the link) -> runs/x/last-12; `base`
// itself when it is no link (a pair folder, a flat pair).
std::string checkpoint_pair_path(const std::string& base);

// The two files of the checkpoint `base` (as load_checkpoint reads them).
struct CheckpointFiles {
  std::string weights, state;
  std::string ema;  // where the EMA weights are, if the checkpoint has them (check that it exists)
};
CheckpointFiles checkpoint_files(const std::string& base);

}  // namespace kiln
