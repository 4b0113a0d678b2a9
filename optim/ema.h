// An exponential moving average of the weights (EMA; Polyak averaging), as timm's ModelEmaV2 and
// torchvision's ExponentialMovingAverage keep it:
//
//   "train": {"ema": {"decay": 0.9998, "warmup": true, "best_by": "live"}}
//
// After every optimizer step that updated the weights, each averaged tensor becomes
//   ema = d_t * ema + (1 - d_t) * w,   d_t = decay, or with warmup d_t = min(decay, (1 + t) / (10 + t))
// where t counts the updates before this one (TensorFlow's ExponentialMovingAverage num_updates:
// the first update uses 0.1, so the average follows the weights closely early on). The copied
// tensors (batch-norm running statistics, counters) take the live values (ema = w).
// The EMA tensors are f32 on the weights' device; an update reads nothing back to the host: a plain
// loop on the CPU, one kernel launch per tensor on a GPU (core/cuda/ema_cuda.cu), on the device's
// stream. The CPU update is deterministic (bit-exact across runs and resumes).
// The trainer owns the EMA model (a second model of the same config) and saves it beside the
// live weights (docs/ema_accumulate.md).
// Tests: tests/optim/ema_test.cpp, tests/engine/accumulate_test.cpp (trainer: resume, metrics).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "core/tensor.h"

namespace kiln {

struct EmaOptions {
  // false: no EMA (the default: `train.ema` absent, null or false)
  bool enabled = false;
  /// the decay per optimizer step, in (0, 1) (default 0.9998)
  double decay = 0.9998;
  /// d_t = min(decay, (1 + t) / (10 + t)) (default true: without it a decay of 0.9998 keeps
  /// 0.9998^5000 = 37% of the initial weights after 5000 steps)
  bool warmup = true;
  /// whose validation top-1 picks the `best` checkpoint: "live" or "ema" (default "live"); both
  /// weight files are saved in every checkpoint whichever it is; the older form of train.best_metric
  /// = "ema_top1", which also takes the other figures
  std::string best_by = "live";

  // `j`: null or false (off), true (the defaults), or an object of the keys above (minus enabled).
  static EmaOptions from_json(const json& j, const std::string& path = "train.ema");
  json to_json() const;  // false when off
};

class WeightEma {
 public:
  struct Entry {
    std::string name;  // for errors
    Tensor live;       // the model's tensor
    Tensor ema;        // its average: same shape, on the same device
    bool average;      // true: averaged (f32 parameters); false: copied (buffers)
  };
  // Checks every entry (averaged ones: f32, contiguous; copied ones: same dtype) before keeping them.
  WeightEma(const EmaOptions& options, std::vector<Entry> entries);

  // d_t for the update that follows t earlier updates.
  double decay_at(int64_t t) const;
  // One update with d_t (t: the updates before this one; the trainer passes the optimizer steps
  // completed before the step, so a resumed run continues the same sequence). `skip` (optional, an
  // f64 [1] on the weights' device, LossScaler::last_step_skipped()): the update, copies included,
  // leaves everything as it is where it holds a value > 0, decided on the device (an fp16 step whose
  // verdict stays there: the same EMA as calling update only after a step taken, nothing read back).
  void update(int64_t t, const Tensor& skip = Tensor());
  // ema = live for every entry (at the start of a run, and when resuming a checkpoint without EMA).
  void reset_to_live();

  const EmaOptions& options() const { return options_; }

 private:
  EmaOptions options_;
  std::vector<Entry> entries_;
};

}  // namespace kiln
