// The config's "train" section (TrainOptions): how a run trains, read by the training engine
// (tools/engine/trainer.h) and the commands (`kiln train`, its schema and help). Prediction reads only
// train.device and train.precision (tools/deploy/precision.h, whose names this section takes), so it
// links no optimizer library. The small parsers of its options live here too: train.accumulate,
// train.class_weights' form and the name-prefix lists (train.freeze, train.init_fresh).
// Tests: tests/engine/config_test.cpp, tests/engine/accumulate_test.cpp, tests/engine/finetune_test.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "data/mix.h"
#include "optim/ema.h"
#include "optim/loss_scaler.h"
#include "tools/deploy/precision.h"

namespace kiln {

// The validation figures train.best_metric and train.early_stopping may name: the live weights'
// top-1, top-5 (fractions, higher is better) and loss (lower is better), and with train.ema the EMA
// weights' (tools/engine/metric_watch.h).
const std::vector<std::string>& validation_metrics();  // top1, top5, loss, ema_top1, ema_top5, ema_loss

// train.early_stopping: ends the run when a validation figure stops improving (docs/training.md,
// "Early stopping"; tools/engine/metric_watch.h). Off when absent, null or false.
struct EarlyStoppingOptions {
  /// the validation figure watched: "top1", "top5", "loss" (lower is better), or with train.ema the EMA
  /// weights' "ema_top1", "ema_top5", "ema_loss" (required)
  std::string metric;
  /// epochs without improvement: the run stops after an evaluation when the figure's best value is
  /// this many epochs old or more (required, >= 1)
  int64_t patience = 0;
  /// an improvement must exceed this, in the figure's units: top1/top5 are fractions (0.001 = 0.1
  /// percentage point), for a loss a decrease (default 0: any improvement counts)
  double min_delta = 0;

  bool enabled() const { return !metric.empty(); }
  // `j`: null or absent (off), or an object of the keys above; `ema`: train.ema is on (the ema_*
  // figures need it). Errors name `path` and what is accepted.
  static EarlyStoppingOptions from_json(const json& j, const std::string& path, bool ema);
  json to_json() const;  // null when off
};

struct TrainOptions {
  /// epochs to train (default 1); with time_budget_minutes, the most epochs to train
  int64_t epochs = 1;
  /// a wall-clock budget for the whole run, in minutes: early in the first epoch the trainer
  /// measures this machine's step and evaluation times and lowers `epochs` to the most that fit, so
  /// the schedule still ends within it (tools/engine/time_budget.h, docs/training.md); needs a schedule
  /// whose length follows the epochs (constant, cosine) and no data.progressive_resize; 0 = off (default 0)
  double time_budget_minutes = 0;
  /// device(s): "" (first GPU if any, else cpu), "cpu", "0", "cuda:1", "0,1", or a GPU number (0) or
  /// a list ([0, 1]), recorded as the string (default "")
  std::string device;
  /// on a GPU: cuDNN benchmark mode, i.e. time every convolution algorithm once per shape and keep the
  /// fastest; pays off for long runs with fixed shapes (default false: cuDNN's heuristics choose)
  bool cudnn_benchmark = false;
  /// "auto", "on" or "off" (default "off"): on a GPU, capture each batch shape's forward, backward
  /// and update once as a CUDA graph and replay it (the update stays eager where the fp16 verdict is
  /// read back); auto falls back to eager steps
  /// where a step cannot be captured (dropout, several GPUs), saying why; on makes that an error, and
  /// so is on with device=cpu (docs/cuda_backend.md, "CUDA graphs")
  std::string cuda_graph = "off";
  /// "fp32", "bf16", "fp16" or "auto" (default "fp32"): the dtype of activations, conv and matmul;
  /// master weights, optimizer state, batch-norm statistics and the loss stay f32; fp16 adds dynamic
  /// loss scaling; "auto" is bf16 on a GPU of compute capability 8.0+, fp32 on a CPU without bf16
  /// units, and on a CPU with them (AVX-512 BF16 or AMX) the one whose measured training step is
  /// faster (bf16 when it takes at most 90% of fp32's); the run folder's config records the choice
  /// (docs/precision.md)
  std::string precision = "fp32";
  /// seed of the initial weights, the data order, augmentation and dropout (default 0)
  int64_t seed = 0;
  /// the training loss (layers/loss.h): a registered loss's name, or {"name": ..., options} for one that takes
  /// options; the run's config records the object (default "cross_entropy")
  json loss = json{{"name", "cross_entropy"}};
  /// label smoothing of the cross-entropy loss, in [0, 1) (default 0)
  double label_smoothing = 0.0;
  /// class weights of the loss, for imbalanced data: "balanced" (n_samples / (n_classes * count_c),
  /// counted on the training split), a list of one number >= 0 per class, or null (default null:
  /// unweighted). PyTorch's weighted mean (F.cross_entropy(weight=...)); docs/reports.md
  json class_weights;
  /// clip the global gradient norm to this value; 0 = no clipping (default 0)
  double clip_grad_norm = 0.0;
  /// gradient checkpointing, passed to the model: "none", "blocks", "every:K" (default: the model's)
  std::string checkpoint;
  /// checkpoint to resume from: a run folder, or runs/x/last (default "": a fresh run)
  std::string resume;
  /// fine-tuning: start from these weights (docs/finetune.md): a safetensors file in PyTorch layout
  /// (a kiln run's, or tools/convert_weights.py's), a run folder (its best checkpoint, else its last)
  /// or a checkpoint (runs/x/last); tensors with the model's names and shapes load, a classifier head
  /// of another num_classes starts fresh, any other mismatch is an error. Not read when resuming: the
  /// checkpoint's weights win (default "": the model's own initialisation)
  std::string init;
  /// fine-tuning: what train.init does not load, as dotted name prefixes (["fc"]): these keep the fresh
  /// model's initial values, e.g. a new classifier head for other classes of the same number
  /// (default []: everything that fits is loaded)
  std::vector<std::string> init_fresh;
  /// fine-tuning: parameters to freeze, as dotted name prefixes (["layer1", "features.0", "fc.bias"]);
  /// the prefix "backbone" (["backbone"]) is everything but the classifier head (the model's last
  /// Linear; docs/finetune.md): they are never updated, and batch-norm layers whose parameters are all
  /// frozen keep their running statistics (default []: nothing frozen)
  std::vector<std::string> freeze;
  /// folder that holds the run folders (default "runs")
  std::string runs_dir = "runs";
  /// progress: print a plain line every N steps when not on a terminal; 0 = ten per epoch (default 0)
  int64_t log_every = 0;
  /// stop each epoch after this many steps; 0 = the whole epoch (default 0; for benchmarks and tests)
  int64_t max_steps_per_epoch = 0;
  /// every step of an epoch trains on the epoch's first batch, held in memory, instead of reading the
  /// loader: training at zero input-pipeline cost, to measure what the pipeline costs (compare the
  /// images/s; tools/bench/bench_pipeline.sh); not a way to train (default false)
  bool reuse_first_batch = false;
  /// end this invocation after N epochs in total, keeping the schedule of `epochs`; `resume=` continues
  /// (for time-limited jobs); 0 = run to `epochs` (default 0)
  int64_t stop_after = 0;
  /// evaluate on the validation split every N epochs and after the last (default 1)
  int64_t eval_every = 1;
  /// also save the `last` checkpoint every N optimizer steps, mid-epoch; 0 = only at epoch ends
  /// (default 0; docs/training.md, "Interrupting and resuming")
  int64_t save_every_steps = 0;
  /// also save the `last` checkpoint when this many minutes have passed since the previous save,
  /// mid-epoch; 0 = off (default 0)
  double save_every_minutes = 0;
  /// how many `last` checkpoints (last-<step> folders) the run folder keeps, the newest; older ones
  /// are removed by each save (default 1)
  int64_t keep_last = 1;
  /// write PNG plots of loss, accuracy and lr (loss.png, accuracy.png, lr.png), rewritten after every
  /// epoch (default true)
  bool plots = true;
  /// write TensorBoard event files (events.out.tfevents.*) in the run folder: the step rows' and
  /// epoch rows' scalars (default true; docs/training.md, "Watching a run")
  bool tensorboard = true;
  /// seconds a collective may wait for the other ranks before the job is aborted (default 600)
  double comm_timeout_s = 600;
  /// AutoBatch's share of free memory when data.batch_size is -1 (default 0.6)
  double autobatch_fraction = 0.6;
  /// fp16 dynamic loss scaling (optim/loss_scaler.h)
  LossScalerOptions loss_scaler;
  /// EMA of the weights, evaluated and saved beside them: false/null (default), true, or
  /// {"decay": 0.9998, "warmup": true, "best_by": "live"|"ema"} (optim/ema.h, docs/ema_accumulate.md)
  EmaOptions ema;
  /// gradient accumulation: N micro-batches per optimizer step (data.batch_size stays the global
  /// batch of a step), or "auto" (stored as 0): AutoBatch picks the smallest N that fits (default 1;
  /// tools/engine/accumulate.h, docs/ema_accumulate.md)
  int64_t accumulate = 1;
  /// batch-level MixUp/CutMix with soft targets (data/mix.h, docs/mixup_tta.md): {"mixup_alpha",
  /// "cutmix_alpha", "prob", "switch_prob"} as timm's Mixup (default: off)
  MixupOptions mixup;
  /// test-time augmentation of the evaluations: "none" or "flip" (the mean of the softmax of the
  /// image and of its left-right mirror; docs/mixup_tta.md) (default "none")
  std::string tta = "none";
  /// which validation figure picks the `best` checkpoint: "top1", "top5", "loss" (the lowest), or with
  /// train.ema the EMA weights' "ema_top1", "ema_top5", "ema_loss" (both weight files are saved in
  /// `best` whichever it is; docs/ema_accumulate.md) (default "top1"; "ema_top1" with train.ema.best_by
  /// = "ema", its older form)
  std::string best_metric = "top1";
  /// stop when a validation figure has not improved for `patience` epochs: {"metric": "top1", "patience":
  /// 5, "min_delta": 0.001}; the stop is recorded, and resuming a stopped run is refused while it would
  /// stop again (docs/training.md, "Early stopping") (default null: off)
  EarlyStoppingOptions early_stopping;
  /// CPU threads of the training computations (OpenMP, which oneDNN uses too): N, or 0 or "auto" for
  /// OpenMP's default (one per core this process may use); OMP_NUM_THREADS, where set, wins; the
  /// loader's threads are data.workers, apart; the run folder's config records the number used
  /// (default "auto"; docs/training.md, "Threads on the CPU")
  int64_t threads = 0;

  static TrainOptions from_json(const json& j, const std::string& path = "train");
  json to_json() const;
};

// train.accumulate: a positive integer N, or "auto" (returned as 0); null is 1.
int64_t accumulate_from_json(const json& j, const std::string& path = "train.accumulate");
json accumulate_to_json(int64_t n);  // 0 -> "auto"

// train.threads: an integer N >= 0, or "auto" (returned as 0, as are 0 and null).
int64_t threads_from_json(const json& j, const std::string& path = "train.threads");

// train.class_weights' form: null, "balanced", or a non-empty list of finite numbers >= 0, not all 0;
// errors name `path` and what is accepted.
void check_class_weights_option(const json& option, const std::string& path);

// A config list of dotted name prefixes (train.freeze, train.init_fresh); errors name `path`.
std::vector<std::string> freeze_list_from_json(const json& j, const std::string& path);

}  // namespace kiln
