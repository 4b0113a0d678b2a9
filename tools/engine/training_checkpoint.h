// The training checkpoint: what the state file of a checkpoint pair holds (TrainingState: epoch, step,
// RNG, the optimizer's and loss scaler's state, the best validation figures, the config as run, a
// mid-epoch save's position), written by save_checkpoint and read back, every field checked, by
// load_checkpoint. The pair's layout on disk, its atomic switch and the reading of its weights are
// tools/deploy/checkpoint.h's (what a predictor needs, without an optimizer library).
// Tests: tests/engine/checkpoint_test.cpp (validation, layout), tests/engine/checkpoint_kill_test.cpp
// (kill -9 during saves, then resume), tests/engine/trainer_test.cpp (exact resume).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/json_reader.h"
#include "core/rng.h"
#include "layers/module.h"
#include "optim/optimizer.h"
#include "tools/deploy/checkpoint.h"

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
// Loads the weights into `model` and returns the training state (refusing a missing or out-of-range
// field, naming the file and the field). `base` is what
// resolve_checkpoint() returns: a checkpoint folder (or the symlink naming one), or a flat base.
// With `ema`: the checkpoint's EMA weights go into it when it has them (state.ema_loaded), checked
// like the weights (same step, finite, fitting the model); a checkpoint without them leaves `ema` alone.
TrainingState load_checkpoint(const std::string& base, Module& model, Module* ema = nullptr);

}  // namespace kiln
