// One replica's run (train_replica, tools/engine/trainer.h), as the phases that train_replica calls
// in turn, and the state they hand on (ReplicaRun):
//
//   prepare_run  config sections, ranks, precision, model, data, optimizer, EMA  (trainer.cpp)
//   plan_batch   AutoBatch and accumulation, the loaders, the schedule            (trainer.cpp)
//   open_run     run folder or checkpoint resume, the step's setup, time budget   (trainer.cpp)
//   run_epoch    the step loop, progress lines, statistics read at log intervals  (epoch.cpp)
//   end_epoch    evaluation (and the EMA's), budget recheck, best_metric and early  (epoch.cpp)
//                stopping (metric_watch.h), metrics row, checkpoints
//   finish_run   TTA evaluation, plots, the report, the result                   (trainer.cpp)
//
// Internal to the engine; the public API is trainer.h. Tests: tests/engine/trainer_test.cpp and the
// tests that train through it (accumulate, time_budget, replicas, finetune, report).
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/pinned.h"
#include "core/device.h"
#include "core/json_reader.h"
#include "data/config.h"
#include "data/loader.h"
#include "layers/module.h"
#include "optim/grad_sync.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "tools/engine/training_checkpoint.h"
#include "tools/engine/train_options.h"
#include "tools/engine/evaluate.h"
#include "tools/engine/metrics.h"
#include "tools/engine/progress.h"
#include "tools/engine/run_lock.h"
#include "tools/engine/time_budget.h"
#include "tools/engine/train_ema.h"
#include "tools/engine/train_step.h"
#include "tools/engine/trainer.h"

namespace kiln::trainer {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t);
std::string fmt(const char* f, double v);  // one number, printf-formatted

// The sections of a config, validated; the top level accepts nothing else.
struct Sections {
  std::string name;
  json model, data, optim, schedule;
  TrainOptions train;
};
Sections read_sections(const json& config);

// data.batch_size is the global batch; -1 (or a fraction in (0, 1)) asks AutoBatch.
struct BatchRequest {
  int64_t global = 64;
  double auto_fraction = 0;  // > 0: AutoBatch with this fraction
};
BatchRequest read_batch(json& data, double default_fraction);

// train.time_budget_minutes (tools/engine/time_budget.h): steps mark_at + 1 .. decide_at are timed
// (from the loop's start when mark_at is 0), and after step decide_at (in the first epoch) the epochs
// are lowered to what fits; every later epoch rechecks them at the last epochs' speed.
struct BudgetState {
  double minutes = 0;                // as asked (the options' is zeroed once decided)
  bool pending = false;              // a decision to take in this invocation (a resumed run has decided)
  int64_t decide_at = 0, mark_at = 0;
  Clock::time_point mark_time;
  BudgetInput in;                    // the decision's inputs, which the rechecks start from
  int64_t epoch = -1;                // the epoch the decision was taken in (-1: none in this invocation)
  int64_t step = 0;                  // and its step
  double last_eval_s = -1;           // the last evaluation's measured seconds (live and EMA weights)
  std::vector<double> epoch_step_s;  // seconds per step of each epoch after the decision's
};

// What the phases hand on. Filled in phase order: each group is set by the phase named above it.
struct ReplicaRun {
  ReplicaRun(Communicator& c, Device d, bool q) : comm(c), device(d), quiet(q) {}
  ReplicaRun(const ReplicaRun&) = delete;
  ReplicaRun& operator=(const ReplicaRun&) = delete;

  Communicator& comm;
  const Device device;
  const bool quiet;  // no progress output
  // prepare_run
  Clock::time_point start;  // train.time_budget_minutes counts from here
  json config;              // the config given, data.batch_size as trained
  Sections s;
  TrainOptions& opt = s.train;  // the budget (or a resume under one) changes its epochs
  BatchRequest breq;
  int rank = 0, world = 1;
  bool lead = true, show = true;  // rank 0; rank 0 and not quiet
  std::string threads_from;       // what set result.threads: "train.threads", "OMP_NUM_THREADS" or "" (OpenMP's default)
  DType compute = DType::f32;
  std::shared_ptr<Module> model;
  DataConfig dcfg;             // the loaders' seed is data.seed ^ train.seed
  uint64_t data_seed_given = 0;  // data.seed as the config gives it (the config as run records it)
  std::shared_ptr<const Dataset> train_set, val_set;
  Tensor class_weights;  // the loss's, or undefined
  std::vector<ParamRef> params;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<TrainingEma> ema;
  // plan_batch
  int64_t accumulate = 1;
  double autobatch_target = 0;
  bool upload_u8 = false;  // data.upload resolved: u8 batches, normalised on the device (batch_images.h)
  std::unique_ptr<DataLoader> train_loader, val_loader;
  LoaderOptions vopt;  // the validation loader's
  int64_t steps_per_epoch = 0;
  ScheduleContext sctx;
  std::unique_ptr<LrSchedule> schedule;
  // open_run
  json as_run;  // the config as run (the run folder's config.json)
  TrainingState state;
  std::string run_dir;
  std::unique_ptr<RunLock> lock;  // rank 0's: the run folder's one writer (tools/engine/run_lock.h)
  json changed = json::object();  // a resume's changed keys: {"optim.lr": [old, new]} (run_history.h)
  std::unique_ptr<MetricsLog> log;  // rank 0's
  std::unique_ptr<GradSync> sync;
  StepSetup step;
  TrainResult result;
  size_t weights_bytes = 0;  // allocated on the device before the first step
  bool tty = false;
  int64_t num_classes = 0;
  int64_t first_epoch = 0, last_epoch = 0;  // this invocation's (train.stop_after)
  std::vector<std::vector<int64_t>> final_confusion;  // from the last evaluation (empty without one)
  BudgetState budget;
  // Interrupt and resume mid-epoch (tools/engine/interrupt.h, epoch.cpp): where the resumed epoch
  // starts (the checkpoint's epoch_step) and its figures so far (TrainingState::progress, rank 0's);
  // the run's seconds before this invocation; the stop signal once the ranks agreed on it; the last
  // save's time (train.save_every_minutes); every how many steps the ranks agree on signals.
  int64_t first_batch = 0;
  std::map<std::string, double> resumed_progress;
  double seconds_before = 0;
  int interrupted = 0;
  bool save_asked = false;  // a SIGUSR1 at an epoch's last step: its end's save says it is the one
  Clock::time_point last_save;
  int64_t poll_every = 1;
  // The learning rate of the last step taken (the epoch's metrics row): a run resumed after its
  // epoch's last step (an abandoned evaluation) takes no step before that row.
  double last_lr = 0;
  PinnedStaging mix_staging;  // MixUp/CutMix's batch in pinned memory on a GPU: its upload does not wait
  RunClock run_clock;         // the progress line's run ETA: where this invocation's training started
};

// What run_epoch hands to end_epoch.
struct EpochOutcome {
  double train_seconds = 0;
  int64_t steps = 0;  // the epoch's steps done (a resumed epoch's before this invocation included)
  std::map<std::string, double> totals;  // the epoch's figures summed over ranks (TrainingState::progress)
};

void prepare_run(ReplicaRun& r, const json& config);
void plan_batch(ReplicaRun& r);
void open_run(ReplicaRun& r);
EpochOutcome run_epoch(ReplicaRun& r, int64_t epoch);
void end_epoch(ReplicaRun& r, int64_t epoch, const EpochOutcome& e);
TrainResult finish_run(ReplicaRun& r);
// After a stop request (r.interrupted; the checkpoint is saved): the plots so far, the line that
// says how to resume; the result, marked interrupted.
TrainResult interrupt_run(ReplicaRun& r);

// Shared by the phases:
// The run's epochs become n (the time budget's decision): the schedule, the config as run, this
// invocation's last epoch and the run folder's config.json follow.
void adopt_epochs(ReplicaRun& r, int64_t n);
// The run's seconds: this invocation's and those before it (a resumed run's).
double run_seconds(const ReplicaRun& r);
// Saves the `last` checkpoint inside epoch `epoch` after its batch `done` (rank 0 writes; every rank
// calls it at the same step): the state with the loader's position and the epoch's figures `totals`.
void save_mid_epoch(ReplicaRun& r, int64_t epoch, int64_t done, const std::map<std::string, double>& totals);
// An evaluation's counts summed over ranks into (loss, top1, top5), and its line
// ("<label>   <what>  loss ..."): label "val" for the live weights, "ema" for train.ema's.
void publish(ReplicaRun& r, const EvalCounts& ec, const char* label, const std::string& what, double& loss,
             double& top1, double& top5);
void publish_eval(ReplicaRun& r, const EvalCounts& ec, const std::string& what);  // "val": the result's val_*
// Rank 0's buffers (BN running statistics) on every rank.
void broadcast_buffers(Communicator& comm, Module& m);

}  // namespace kiln::trainer
