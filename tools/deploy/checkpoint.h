// Checkpoints. A checkpoint named `<run>/last` is a folder holding a pair of files:
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
//                             tools/deploy/checkpoint_legacy.h).
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
// Loading refuses a pair from different steps, a state with a missing or out-of-range field,
// non-finite tensors (weights, batch-norm buffers, optimizer state) and integer tensors for floating
// parameters, naming the file and the field or tensor. Flat pairs (`<base>.safetensors` +
// `<base>.state.safetensors`, written by earlier kiln) still load.
// Tests: tests/engine/checkpoint_test.cpp (validation, layout), tests/deploy/checkpoint_kill_test.cpp
// (kill -9 during saves, then resume), tests/engine/trainer_test.cpp (exact resume).
#pragma once
#include <map>
#include <string>

#include "core/json_reader.h"
#include "core/rng.h"
#include "layers/module.h"
#include "optim/optimizer.h"

namespace kiln {

// The best value so far of one validation figure (tools/engine/metric_watch.h): train.best_metric's,
// which picks the `best` checkpoint, and train.early_stopping's, so that a resumed run goes on
// comparing with it.
struct MetricRecord {
  std::string metric;  // "top1", "top5", "loss", "ema_top1", "ema_top5", "ema_loss"; "" = nothing yet
  double best = 0;     // its best value
  int64_t epoch = 0;   // the epoch (1-based) that reached it; 0 where unknown (an earlier kiln's best_top1)
};

struct TrainingState {
  int64_t epoch = 0;  // epochs completed
  int64_t step = 0;   // optimizer steps completed
  // Batches of epoch `epoch` already trained: 0 at an epoch's end; a mid-epoch save's position
  // (train.save_every_*, SIGUSR1, an interrupt), where the resumed run starts that epoch's loader.
  // It may equal the epoch's steps: the epoch trained, its evaluation not done (an interrupt then).
  int64_t epoch_step = 0;
  // With epoch_step > 0: the epoch's figures so far (its loss sum, correct count, samples, training
  // seconds, data-wait seconds), so the resumed epoch's metrics row covers the whole epoch; and the
  // run's seconds so far ("run_seconds", train.time_budget_minutes' clock). Names -> numbers.
  std::map<std::string, double> progress;
  std::string kiln_version;  // of the kiln that wrote it (load: "" when the checkpoint predates it)
  RngState rng;       // the default generator after `step`
  // train.best_metric's best so far. The metadata also keeps it as "best_top1" (-1 unless the metric
  // is a top-1) for checkpoints of earlier kiln, whose best_top1 is read into it.
  MetricRecord best;
  // train.early_stopping's best so far (only improvements by more than its min_delta count), and the
  // epoch (1-based) after which it ended the run (0: it did not; a resume clears it when it goes on).
  MetricRecord early_stopping;
  int64_t stopped_early = 0;
  std::map<std::string, double> scaler;  // LossScaler::state_dict() (empty without fp16)
  OptimizerState optimizer;
  json config;  // the config as run
  bool ema_loaded = false;  // load_checkpoint: the checkpoint had EMA weights and they were loaded
};

// Saves the pair as checkpoint `base` (`<run>/last`: the folder layout above).
// With `ema`, its weights are saved in the same folder as `<name>.ema.safetensors` (same step).
// `keep`: how many pair folders of `base` stay, the newest by step (train.keep_last; `base` names the
// new one); older ones are removed after the switch.
void save_checkpoint(const std::string& base, Module& model, const TrainingState& state, Module* ema = nullptr,
                     int64_t keep = 1);
// Loads the weights into `model` and returns the training state. `base` is what
// resolve_checkpoint() returns: a checkpoint folder (or the symlink naming one), or a flat base.
// With `ema`: the checkpoint's EMA weights go into it when it has them (state.ema_loaded), checked
// like the weights (same step, finite, fitting the model); a checkpoint without them leaves `ema` alone.
TrainingState load_checkpoint(const std::string& base, Module& model, Module* ema = nullptr);
// Loads only weights (PyTorch layout) into `model`: FILE.safetensors, a checkpoint, or a run folder
// (the weights it stands for: run_weights_checkpoint).
void load_weights(const std::string& path, Module& model);
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
