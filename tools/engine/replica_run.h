// One replica's run (train_replica, tools/engine/trainer.h) as the phases that train_replica calls in
// turn; each takes the parts of the run it reads and returns what it makes:
//
//   make_replica       where this replica runs: communicator, device, rank, what it prints
//   prepare_run        -> Prepared {RunConfig cfg, RunData data, Learner learner}: config sections and
//                      options, precision, threads; the datasets; model, optimizer, EMA   (trainer.cpp)
//   plan_batch         -> BatchPlan: AutoBatch and accumulation, the loaders, steps/epoch  (batch_plan.cpp)
//   make_run_schedule  -> Schedule: the learning-rate schedule                             (batch_plan.cpp)
//   open_run           -> Opened {RunFolder, RunSpan, RunStep, BudgetState, RunProgress}: run folder
//                      or checkpoint resume, the step's setup, the time budget             (trainer.cpp)
//   run_epoch          the step loop, progress lines, statistics read at log intervals   (epoch.cpp)
//   end_epoch          evaluation (and the EMA's), budget recheck, best_metric and early  (epoch.cpp)
//                      stopping (metric_watch.h), metrics row, checkpoints
//   finish_run         TTA evaluation, plots, the report, the result                     (trainer.cpp)
//   interrupt_run      after a stop signal: plots, the resume line, the result           (trainer.cpp)
//
// run_epoch, end_epoch and finish_run take EpochInputs: the parts above by name, built once by
// train_replica (as timm's train_one_epoch(model, loader, optimizer, ...) takes its arguments). The
// helpers inside take only the parts they use, but for the epoch's helpers that reach into most of
// them, which take EpochInputs and bind the parts they use in their first lines.
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
#include "core/rng.h"
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

// Where this replica runs and what it prints; fixed for the run.
struct Replica {
  Communicator& comm;
  Device device;
  bool quiet = false;  // no progress output
  int rank = 0, world = 1;
  bool lead = true;    // rank 0: writes the run folder
  bool show = true;    // rank 0 and not quiet
  bool tty = false;    // stdout is a terminal: the progress line is redrawn in place
  // Over several ranks, signals are agreed on every 8 steps (one small all-reduce that waits for the
  // device); alone, every step at no cost (tools/engine/interrupt.h).
  int64_t poll_every = 1;
};
Replica make_replica(Communicator& comm, Device device, bool quiet);

// The run's configuration as read (prepare_run): the config given, its sections and options.
struct RunConfig {
  Clock::time_point start;  // train.time_budget_minutes counts from here
  json config;              // the config given, data.batch_size as trained
  Sections s;               // s.train: the options; the budget (or a resume under one) changes their epochs
  BatchRequest breq;        // the global batch (AutoBatch's choice once plan_batch has run)
  DType compute = DType::f32;
  int threads = 0;           // CPU threads of the computations, as used
  std::string threads_from;  // what set them: "train.threads", "OMP_NUM_THREADS" or "" (OpenMP's default)
  TrainOptions& opt() { return s.train; }
  const TrainOptions& opt() const { return s.train; }
};

// The data (prepare_run): its config and datasets. The loaders' seed is data.seed ^ train.seed.
struct RunData {
  DataConfig dcfg;
  uint64_t data_seed_given = 0;  // data.seed as the config gives it (the config as run records it)
  std::shared_ptr<const Dataset> train_set, val_set;
  int64_t num_classes = 0;
};

// The model and what trains it (prepare_run).
struct Learner {
  std::shared_ptr<Module> model;
  std::vector<ParamRef> params;  // the trainable ones
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<TrainingEma> ema;  // train.ema, or none
  Tensor class_weights;              // the loss's, or undefined
};

// What prepare_run builds.
struct Prepared {
  RunConfig cfg;
  RunData data;
  Learner learner;
};

// What plan_batch decides: the micro-batches, AutoBatch's memory target, the loaders and the steps of
// an epoch.
struct BatchPlan {
  int64_t accumulate = 1;
  double autobatch_target = 0;
  bool upload_u8 = false;  // data.upload resolved: u8 batches, normalised on the device (batch_images.h)
  std::unique_ptr<DataLoader> train_loader, val_loader;
  LoaderOptions vopt;  // the validation loader's
  int64_t steps_per_epoch = 0;
};

// The learning-rate schedule (make_run_schedule); its epochs follow the time budget's decision.
struct Schedule {
  ScheduleContext context;
  std::unique_ptr<LrSchedule> lr;
};

// The run folder, written by rank 0 (open_run): its path, its one writer's lock (run_lock.h), the
// metrics log, the config as run (config.json) and a resume's changed keys (run_history.h).
struct RunFolder {
  std::string dir;
  std::unique_ptr<RunLock> lock;
  std::unique_ptr<MetricsLog> log;
  json as_run;
  json changed = json::object();  // {"optim.lr": [old, new]}
};

// This invocation's span of the run (open_run): its epochs (train.stop_after), and where a resumed
// epoch starts (the checkpoint's epoch_step) with its figures so far (TrainingState::progress, rank
// 0's) and the run's seconds before this invocation.
struct RunSpan {
  int64_t first_epoch = 0, last_epoch = 0;
  int64_t first_batch = 0;
  std::map<std::string, double> resumed_progress;
  double seconds_before = 0;
};

// The training step (open_run): its setup (make_step_setup), the all-reduce it uses over several
// ranks, the device memory of the weights before the first step, MixUp/CutMix's staging buffer.
struct RunStep {
  std::unique_ptr<GradSync> sync;
  StepSetup setup;
  size_t weights_bytes = 0;
  PinnedStaging mix_staging;  // in pinned memory on a GPU: its upload does not wait
};

// What the epochs advance (open_run starts it): the training state the checkpoints save, the result,
// the last evaluation's confusion matrix, a stop signal the ranks agreed on (tools/engine/interrupt.h),
// a save asked for at an epoch's last step, the last save's time (train.save_every_minutes), the last
// step's learning rate (the metrics row: a run resumed after its epoch's last step takes no step
// before it) and the progress line's run clock.
struct RunProgress {
  TrainingState state;
  TrainResult result;
  std::vector<std::vector<int64_t>> final_confusion;  // empty without an evaluation
  int interrupted = 0;
  bool save_asked = false;
  Clock::time_point last_save;
  double last_lr = 0;
  RunClock run_clock;
};

// What open_run makes.
struct Opened {
  RunFolder folder;
  RunSpan span;
  RunStep step;
  BudgetState budget;
  RunProgress prog;
};

// What run_epoch hands to end_epoch.
struct EpochOutcome {
  double train_seconds = 0;
  int64_t steps = 0;  // the epoch's steps done (a resumed epoch's before this invocation included)
  std::map<std::string, double> totals;  // the epoch's figures summed over ranks (TrainingState::progress)
};

// What an epoch reads and advances, as run_epoch and end_epoch take it: the replica, the options,
// the data, the model and its optimizer, the batch plan (the loaders), the schedule, the step, and
// of the run the folder, its span, the budget and the progress.
struct EpochInputs {
  const Replica& rep;
  RunConfig& cfg;
  const RunData& data;
  Learner& learner;
  BatchPlan& plan;
  Schedule& sched;
  RunStep& step;
  RunFolder& folder;
  RunSpan& span;
  BudgetState& budget;
  RunProgress& prog;
};

Prepared prepare_run(const Replica& rep, const json& config);

// A probe's training steps on the run's model (AutoBatch's memory probe, precision "auto"'s timing):
// the model's buffers (batch-norm statistics) and the random generator as they were before it, put
// back when it goes out of scope, so the run is the one it would have been without the probe.
class ProbeRestore {
 public:
  explicit ProbeRestore(Module& model) : model_(model), rng_(default_generator().state()) {
    for (auto& [n, t] : model_.named_buffers()) saved_[n] = t.detach().clone();
  }
  ~ProbeRestore() {
    for (auto& [n, t] : model_.named_buffers()) copy_tensor(t, saved_[n]);
    default_generator().set_state(rng_);
  }
  ProbeRestore(const ProbeRestore&) = delete;
  ProbeRestore& operator=(const ProbeRestore&) = delete;

 private:
  Module& model_;
  std::map<std::string, Tensor> saved_;
  RngState rng_;
};
BatchPlan plan_batch(const Replica& rep, RunConfig& cfg, RunData& data, Learner& learner);
Schedule make_run_schedule(const RunConfig& cfg, const Learner& learner, const BatchPlan& plan);
Opened open_run(const Replica& rep, RunConfig& cfg, const RunData& data, Learner& learner, const BatchPlan& plan,
                Schedule& sched);
EpochOutcome run_epoch(const EpochInputs& in, int64_t epoch);
void end_epoch(const EpochInputs& in, int64_t epoch, const EpochOutcome& e);
TrainResult finish_run(const EpochInputs& in);
// After a stop request (prog.interrupted; the checkpoint is saved): the plots so far, the line that
// says how to resume; the result, marked interrupted.
TrainResult interrupt_run(const Replica& rep, const RunConfig& cfg, const BatchPlan& plan, RunFolder& folder,
                          RunProgress& prog);

// Shared by the phases:
// The run's epochs become n (the time budget's decision): the schedule, the config as run, this
// invocation's last epoch and the run folder's config.json follow.
void adopt_epochs(const Replica& rep, RunConfig& cfg, Schedule& sched, RunFolder& folder, RunSpan& span,
                  RunProgress& prog, int64_t n);
// The run's seconds: this invocation's and those before it (a resumed run's).
double run_seconds(const RunConfig& cfg, const RunSpan& span);
// Saves the `last` checkpoint inside epoch `epoch` after its batch `done` (rank 0 writes; every rank
// calls it at the same step): the state with the loader's position and the epoch's figures `totals`.
void save_mid_epoch(const EpochInputs& in, int64_t epoch, int64_t done, const std::map<std::string, double>& totals);
// An evaluation's counts summed over ranks into (loss, top1, top5), and its line
// ("<label>   <what>  loss ..."): label "val" for the live weights, "ema" for train.ema's.
void publish(const Replica& rep, const EvalCounts& ec, const char* label, const std::string& what, double& loss,
             double& top1, double& top5);
void publish_eval(const Replica& rep, TrainResult& result, const EvalCounts& ec, const std::string& what);  // "val"
// Rank 0's buffers (BN running statistics) on every rank.
void broadcast_buffers(Communicator& comm, Module& m);

}  // namespace kiln::trainer
