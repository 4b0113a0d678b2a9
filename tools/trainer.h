// The trainer: `kiln train CONFIG [key=value ...]` and `kiln eval`. A config has the sections
//
//   "name":     run name (runs/<name>/)                       "model":    models/registry.h
//   "data":     data/config.h (batch_size is the GLOBAL batch) "optim":    optim/optimizer.h
//   "schedule": optim/lr_schedule.h                           "train":    TrainOptions below
//
// One process trains on one device, or is one rank of `mpirun -np N` (CPU ranks, or one GPU per
// rank). Rank 0 broadcasts the initial weights, every rank reads its own shard of the data, the
// gradients are averaged in buckets during backward (optim/grad_sync.h), and only rank 0 writes
// logs and checkpoints; evaluation counts are summed over ranks.
// Tests: tests/tools/trainer_test.cpp, tests/tools/finetune_test.cpp (train.init, train.freeze), tests/slow/, tests/mpi/.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/json_util.h"
#include "optim/ema.h"
#include "data/mix.h"
#include "optim/loss_scaler.h"

namespace kiln {

struct TrainOptions {
  /// epochs to train (default 1); with time_budget_minutes, the most epochs to train
  int64_t epochs = 1;
  /// a wall-clock budget for the whole run, in minutes: early in the first epoch the trainer
  /// measures this machine's step and evaluation times and lowers `epochs` to the most that fit, so
  /// the schedule still ends within it (tools/time_budget.h, docs/training.md); needs a schedule
  /// whose length follows the epochs (constant, cosine) and no data.progressive_resize; 0 = off (default 0)
  double time_budget_minutes = 0;
  /// device(s): "" (first GPU if any, else cpu), "cpu", "0", "cuda:1", "0,1" (default "")
  std::string device;
  /// on a GPU: cuDNN benchmark mode, i.e. time every convolution algorithm once per shape and keep the
  /// fastest; pays off for long runs with fixed shapes (default false: cuDNN's heuristics choose)
  bool cudnn_benchmark = false;
  /// "fp32", "bf16", "fp16" or "auto" (default "fp32"): the dtype of activations, conv and matmul;
  /// master weights, optimizer state, batch-norm statistics and the loss stay f32; fp16 adds dynamic
  /// loss scaling; "auto" is bf16 where the device has bf16 units (a GPU of compute capability 8.0+;
  /// a CPU with AVX-512 BF16 or AMX), else fp32, and the run folder's config records the choice
  /// (docs/precision.md)
  std::string precision = "fp32";
  /// seed of the initial weights, the data order, augmentation and dropout (default 0)
  int64_t seed = 0;
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
  /// fine-tuning: parameters to freeze, as dotted name prefixes (["layer1", "features.0", "fc.bias"]):
  /// they are never updated, and batch-norm layers whose parameters are all frozen keep their running
  /// statistics (default []: nothing frozen)
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
  /// write PNG plots of loss, accuracy and lr at the end (default true)
  bool plots = true;
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
  /// tools/accumulate.h, docs/ema_accumulate.md)
  int64_t accumulate = 1;
  /// batch-level MixUp/CutMix with soft targets (data/mix.h, docs/mixup_tta.md): {"mixup_alpha",
  /// "cutmix_alpha", "prob", "switch_prob"} as timm's Mixup (default: off)
  MixupOptions mixup;
  /// test-time augmentation of the evaluations: "none" or "flip" (the mean of the softmax of the
  /// image and of its left-right mirror; docs/mixup_tta.md) (default "none")
  std::string tta = "none";

  static TrainOptions from_json(const json& j, const std::string& path = "train");
  json to_json() const;
};

// The dtype a model computes in for a precision name ("fp32", "bf16", "fp16"; master weights stay
// f32, docs/precision.md) on `device`; "auto" is resolve_precision's; throws for any other name.
DType compute_dtype_of(const std::string& precision, Device device);
// train.precision = "auto" on `device`: "bf16" where it has bf16 arithmetic units (native_bf16: a
// GPU of compute capability 8.0 or newer, a CPU with AVX-512 BF16 or AMX), else "fp32" (bf16 would
// compute in f32 with conversions, or by emulation, there: slower). Other names are returned as
// they are. The trainer takes bf16 only when every rank's device has the units.
std::string resolve_precision(const std::string& precision, Device device);

struct TrainResult {
  double val_top1 = 0, val_top5 = 0, val_loss = 0;
  double ema_val_top1 = 0, ema_val_top5 = 0, ema_val_loss = 0;  // with train.ema (0 otherwise)
  int64_t accumulate = 1;  // micro-batches per optimizer step (train.accumulate, "auto"'s choice)
  double train_loss = 0, train_acc = 0;
  double images_per_s = 0;
  double data_wait_share = 0;
  int64_t batch = 0;  // the global batch trained with (AutoBatch's choice with batch=-1)
  int64_t steps = 0;
  int64_t epochs = 0;  // the run's train.epochs: the config's, or train.time_budget_minutes' choice
  int64_t skipped_steps = 0;  // fp16: steps skipped for a non-finite gradient (0 otherwise)
  double loss_scale = 0;      // fp16: the loss scale at the end (0 otherwise)
  double peak_bytes = 0;  // the device allocator's peak during training, above the model's weights
                          // (activations, gradients, optimizer state, workspaces; this rank's)
  double autobatch_target_bytes = 0;  // with AutoBatch: the memory it aimed at (0 otherwise)
  std::string run_dir;
};

// Trains with `config` (a full config, overrides applied). `quiet` suppresses progress output.
// After the last epoch's evaluation rank 0 writes the classification report (tools/report.h:
// report.csv, report.json, confusion.csv, confusion.png, confused_pairs.csv) into the run folder.
//   - one device: this process trains alone;
//   - train.device listing several GPUs ("0,1"): one replica per GPU, each on its own thread, with
//     an NCCL communicator per GPU (the global batch split evenly between them);
//   - started by mpirun: this process is one rank; its GPU is picked by its local rank (or it is a
//     CPU rank), with NCCL between GPU ranks (MPI hands out the NCCL id) and MPI between CPU ranks.
// Returns rank 0's result.
TrainResult train(const json& config, bool quiet = false);

// Runs one replica of `config` per device, each on its own thread with comms[i] (rank i of
// comms.size()); returns rank 0's result. If a replica fails, every communicator is aborted so the
// others stop too, and the first failure is rethrown. train() uses it with NCCL communicators; tests
// run it on CPU replicas with make_thread_communicators (core/comm.h).
TrainResult train_replicas(const json& config, const std::vector<Device>& devices,
                           std::vector<std::unique_ptr<Communicator>> comms, bool quiet = false);

// One replica: trains `config` on `device` as rank comm.rank() of comm.size() (the whole job when
// the size is 1). train() and train_replicas() (tools/train_launch.cpp) start one per process or
// per GPU; tools/trainer.cpp holds its loop.
TrainResult train_replica(const json& config, bool quiet, Communicator& comm, Device device);

struct EvalResult {
  double top1 = 0, top5 = 0, loss = 0;
  int64_t samples = 0;
  std::vector<std::vector<int64_t>> confusion;  // [true][predicted]
  std::vector<std::string> class_names;         // one per class, or empty (reports number them)
};
// Evaluates the weights file (safetensors, PyTorch layout) on the validation split.
EvalResult evaluate(const json& config, const std::string& weights);

}  // namespace kiln
