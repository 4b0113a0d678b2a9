// The training loop, as the phases of replica_run.h: prepare the run (ranks, device, model, data,
// optimizer), plan the batch (AutoBatch, accumulation), open or resume the run folder, then epochs
// (tools/engine/epoch.cpp) and the finish (TTA, plots, the report); also `kiln eval`'s evaluate().
#include "tools/engine/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>

#include <omp.h>

#include "core/allocator.h"
#include "core/comm.h"
#include "core/device.h"
#include "core/rng.h"
#include "core/version.h"
#include "data/config.h"
#include "models/registry.h"
#include "optim/grad_sync.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "tools/deploy/checkpoint.h"
#include "tools/engine/training_checkpoint.h"
#include "tools/deploy/config.h"
#include "tools/deploy/model_check.h"
#include "tools/deploy/model_io.h"
#include "tools/deploy/predict.h"
#include "tools/engine/accumulate.h"
#include "tools/engine/autobatch.h"
#include "tools/engine/batch_images.h"
#include "tools/engine/class_weights.h"
#include "tools/engine/console_log.h"
#include "tools/engine/metric_watch.h"
#include "tools/engine/evaluate.h"
#include "tools/engine/finetune.h"
#include "tools/engine/interrupt.h"
#include "tools/engine/metrics.h"
#include "tools/engine/mpi_comm.h"
#include "tools/engine/progress.h"
#include "tools/engine/replica_run.h"
#include "tools/engine/report.h"
#include "tools/engine/run_history.h"
#include "tools/engine/run_lock.h"
#include "tools/engine/time_budget.h"
#include "tools/engine/train_ema.h"
#include "tools/engine/train_step.h"

namespace fs = std::filesystem;

namespace kiln {

namespace trainer {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

Sections read_sections(const json& config) {
  JsonReader r(config, "");
  Sections s;
  s.name = r.get("name", "run");
  KILN_CHECK(!s.name.empty() && s.name.find('/') == std::string::npos, "config: name \"", s.name,
             "\" must be a non-empty file name (no '/')");
  s.model = r.require("model");
  s.data = r.require("data");
  s.optim = r.has("optim") ? r.raw("optim") : json{{"name", "sgd"}, {"lr", 0.1}};
  s.schedule = r.has("schedule") ? r.raw("schedule") : json{{"name", "constant"}};
  s.train = TrainOptions::from_json(r.raw("train"), "train");
  r.allow("kiln_version");  // a run folder's config.json records the kiln that ran it (informational)
  r.finish();
  if (!s.train.checkpoint.empty()) s.model["checkpoint"] = s.train.checkpoint;
  return s;
}

BatchRequest read_batch(json& data, double default_fraction) {
  BatchRequest b;
  if (KeyRecorder* rec = KeyRecorder::current())  // read here before the loader's integer: its listing
    rec->note({"data.batch_size", "number", b.global, true, false,
               "an integer >= 1, -1 (AutoBatch) or a fraction in (0, 1)"});
  if (!data.is_object() || !data.contains("batch_size")) return b;
  const json& v = data["batch_size"];
  KILN_CHECK(v.is_number(), "config: data.batch_size must be a number (a batch size, -1 for AutoBatch, or a memory "
             "fraction in (0, 1)), not ", v.dump());
  double x = v.get<double>();
  if (x == -1) b.auto_fraction = default_fraction;
  else if (x > 0 && x < 1) b.auto_fraction = x;
  else {
    KILN_CHECK(json_integer(v, 1, INT64_MAX, b.global) == IntegerCheck::ok, "config: data.batch_size = ", v.dump(),
               " is not accepted; accepted: a positive integer, -1 (AutoBatch at 60% of free memory) or a fraction in (0, 1)");
  }
  return b;
}

void broadcast_buffers(Communicator& comm, Module& m) {
  for (auto& [n, t] : m.named_buffers()) comm.broadcast(t, 0);
}

namespace {

// --- class weights and the end-of-training report (docs/reports.md) ------------------------------

// train.class_weights as the loss's (K) f32 weights on `device`; undefined when unweighted.
Tensor loss_class_weights(const TrainOptions& opt, const Dataset& train, Device device, bool show) {
  std::vector<double> w = resolve_class_weights(opt.class_weights, train, "train.class_weights");
  if (w.empty()) return Tensor();
  if (show) {
    std::cout << "class weights (" << (opt.class_weights.is_string() ? "balanced" : "given") << "):";
    for (size_t c = 0; c < w.size() && c < 20; ++c) std::cout << " " << fmt("%.4g", w[c]);
    std::cout << (w.size() > 20 ? " ...\n" : "\n");
  }
  return Tensor::from_vector(w, {static_cast<int64_t>(w.size())}, DType::f32).to(device);
}

// The names the reports label classes with: the source's (runs also save them as classes.json).
std::vector<std::string> report_class_names(const Dataset& d) { return d.class_names(); }

// Rank 0 at the end of training: the report files into the run folder, the table to stdout.
void write_run_report(const std::string& run_dir, const std::vector<std::vector<int64_t>>& confusion,
                      const std::vector<std::string>& names, bool show) {
  ClassificationReport rep = classification_report(confusion, names);
  write_report_files(rep, run_dir);
  if (show) std::cout << format_report(rep) << "report: " << run_dir << "/report.csv, confusion.png\n";
}

// --- prepare the run --------------------------------------------------------------------------------

// train.threads: the training thread's OpenMP threads, which oneDNN's primitives and kiln's CPU kernels
// use (with libgomp a thread's own setting: replicas of one process each set theirs; the loader's
// threads, data.workers, run no OpenMP). OMP_NUM_THREADS, where set, wins (its first number, set
// again: an earlier run of this process may have changed the thread's), and a line says so when it
// differs. The number used goes into the result and the config as run.
void set_threads(ReplicaRun& r) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  const bool by_env = env != nullptr && *env != '\0';
  const long env_n = by_env ? std::strtol(env, nullptr, 10) : 0;  // "4" or "4,2" (nested levels): 4
  if (env_n > 0) omp_set_num_threads(static_cast<int>(env_n));
  else if (!by_env && r.opt.threads > 0) omp_set_num_threads(static_cast<int>(r.opt.threads));
  r.result.threads = omp_get_max_threads();
  r.threads_from = by_env ? "OMP_NUM_THREADS" : r.opt.threads > 0 ? "train.threads" : "";
  if (r.show && by_env && r.opt.threads > 0 && r.result.threads != r.opt.threads)
    std::cout << "threads: OMP_NUM_THREADS=" << env << " overrides train.threads = " << r.opt.threads << ": "
              << r.result.threads << " CPU threads\n";
}

// The config's sections, the ranks, the precision (train.precision = "auto" agreed over the ranks).
void read_run_config(ReplicaRun& r, const json& config_in) {
  r.start = Clock::now();
  r.config = config_in;
  r.s = read_sections(r.config);
  r.breq = read_batch(r.config["data"], r.opt.autobatch_fraction);
  r.comm.set_timeout(std::chrono::milliseconds(static_cast<int64_t>(r.opt.comm_timeout_s * 1000)));
  r.rank = r.comm.rank();
  r.world = r.comm.size();
  if (r.opt.precision == "auto") {  // bf16 when every rank's device has the units; recorded as run
    std::vector<double> units{resolve_precision("auto", r.device) == "bf16" ? 1.0 : 0.0};
    r.comm.all_reduce_doubles(units);
    r.opt.precision = units[0] == r.world ? "bf16" : "fp32";
  }
  r.compute = compute_dtype_of(r.opt.precision, r.device);
  r.lead = r.rank == 0;
  r.show = r.lead && !r.quiet;
  set_threads(r);
  set_conv_benchmark(r.device, r.opt.cudnn_benchmark);  // cuDNN's on a GPU; the CPU has none
}

// The model (train.init's weights), the data config and the datasets, checked before anything is
// allocated or written; the loss's class weights.
void build_model_and_data(ReplicaRun& r) {
  const TrainOptions& opt = r.opt;
  manual_seed(static_cast<uint64_t>(opt.seed));
  r.model = models::build_model(r.s.model, "model");
  if (!opt.init.empty() && opt.resume.empty()) load_init_weights(*r.model, opt.init, opt.init_fresh, r.show);
  else if (!opt.init.empty() && r.show) std::cout << "init: not read: resuming, the checkpoint's weights are loaded\n";
  r.model->to(r.device);
  if (r.breq.auto_fraction > 0) r.config["data"]["batch_size"] = 1;  // validated below; chosen by AutoBatch
  else r.config["data"]["batch_size"] = r.breq.global;
  r.dcfg = DataConfig::from_json(r.config["data"], "data");
  r.data_seed_given = r.dcfg.loader.seed;
  r.dcfg.loader.seed = static_cast<uint64_t>(opt.seed) ^ r.dcfg.loader.seed;
  if (opt.time_budget_minutes > 0) {  // tools/engine/time_budget.h: what a budget can shorten
    const json sname = r.s.schedule.is_object() ? r.s.schedule.value("name", json("constant")) : json();
    KILN_CHECK(sname == "cosine" || sname == "constant", "train.time_budget_minutes = ", opt.time_budget_minutes,
               " needs a schedule whose length follows train.epochs (cosine, constant); schedule.name = ", sname.dump(),
               " has its steps at fixed epochs: set them for the epochs you want and drop the budget");
    KILN_CHECK(!r.dcfg.progressive_resize.enabled(), "train.time_budget_minutes = ", opt.time_budget_minutes,
               " cannot be used with data.progressive_resize, whose sizes change at fixed epochs");
  }
  // bf16 training: the loader writes bf16 batches (half the bytes to move); fp16 casts on the device.
  if (r.compute == DType::bf16) r.dcfg.loader.dtype = "bf16";
  r.train_set = make_dataset(r.dcfg, Split::train);
  r.val_set = make_dataset(r.dcfg, Split::val);
  // Before anything is allocated or written: the loaders' buffers fit, the model takes the images.
  check_before_run(*r.model, r.dcfg, r.train_set->image_shape(),
                   r.breq.auto_fraction > 0 ? 1 : r.breq.global / r.world, r.train_set->num_classes());
  r.class_weights = loss_class_weights(opt, *r.train_set, r.device, r.show);
}

// The optimizer over the trainable parameters, rank 0's initial weights on every rank, the EMA.
void build_optimizer(ReplicaRun& r) {
  r.params = trainable_params(*r.model, r.opt.freeze, r.show);
  mark_no_decay_1d(r.params);
  r.optimizer = make_optimizer(r.s.optim, r.params, "optim");
  if (r.world > 1) {  // rank 0's initial weights everywhere (also the buffers)
    for (auto& [n, t] : r.model->named_parameters()) r.comm.broadcast(t, 0);
    broadcast_buffers(r.comm, *r.model);
  }
  // EMA of the weights (optim/ema.h, tools/engine/train_ema.h): starts as a copy of the initial weights.
  r.ema = make_training_ema(r.opt.ema, r.s.model, *r.model, r.device);
}

}  // namespace

void prepare_run(ReplicaRun& r, const json& config) {
  read_run_config(r, config);
  build_model_and_data(r);
  build_optimizer(r);
}

// --- plan the batch ---------------------------------------------------------------------------------

namespace {

// Probe with cuDNN's heuristics: benchmark mode would time every algorithm of every probe batch
// (conv plans are per batch size); training then benchmarks its own batch once.
struct BenchmarkOff {
  Device d;
  bool was;
  explicit BenchmarkOff(Device dev) : d(dev), was(conv_benchmark(dev)) { if (was) set_conv_benchmark(d, false); }
  ~BenchmarkOff() { if (was) set_conv_benchmark(d, true); }
};

// AutoBatch's probe: the peak memory of the training step's forward and backward on b random
// images (make_step_setup's StepUse::probe), plus the optimizer's state, allocated at the first step.
std::function<double(int64_t)> memory_probe(ReplicaRun& r, const ImageShape& shape) {
  CachingAllocator& alloc = allocator_for(r.device);
  const double state_bytes = r.optimizer->state_bytes();
  StepOptions so = step_options(r.opt);
  so.class_weights = r.class_weights;
  so.use = StepUse::probe;
  const StepSetup setup = make_step_setup(so, r.device, *r.optimizer);
  return [&r, &alloc, shape, state_bytes, setup](int64_t b) -> double {
    r.optimizer->zero_grad();
    alloc.reset_peak();
    size_t base = alloc.stats().allocated;
    try {
      // With data.upload u8: host bytes, uploaded and normalised inside the step as in training.
      Tensor x = probe_images(b, shape, r.upload_u8, r.device, r.compute);
      Tensor y = Tensor::zeros({b}, DType::i64, r.device);
      train_step(*r.model, *r.optimizer, StepBatch{x, y, Tensor(), r.dcfg.train_transforms.normalize().options()}, setup);
    } catch (const OutOfMemoryError&) {  // also TooLargeError: auto_batch reads which one it was
      r.optimizer->zero_grad();
      throw;
    }
    double peak = static_cast<double>(alloc.stats().peak - base) + state_bytes;
    r.optimizer->zero_grad();
    return peak;
  };
}

// train.accumulate = "auto": the smallest number of micro-batches whose micro-batch fits, the same
// on every rank.
void choose_accumulation(ReplicaRun& r, const std::function<double(int64_t)>& probe, double free_bytes) {
  KILN_CHECK(r.breq.global % r.world == 0, "data.batch_size = ", r.breq.global,
             " is the global batch and must divide by the ", r.world, " ranks");
  AccumulationPlan plan = plan_accumulation(probe, free_bytes, r.opt.autobatch_fraction, r.breq.global / r.world);
  // The same N on every rank: the one for the smallest micro-batch that fits.
  r.accumulate = smallest_accumulation(r.breq.global / r.world, r.comm.all_reduce_min(plan.autobatch.batch));
  r.autobatch_target = plan.autobatch.target_bytes;
  if (r.show)
    std::cout << plan.report << (r.accumulate != plan.n ? " (another rank fits less: " + std::to_string(r.accumulate) +
                                                              " micro-batches on every rank)" : "") << "\n";
}

// data.batch_size = -1 (or a fraction): the largest batch that fits, the same on every rank.
void choose_batch(ReplicaRun& r, const std::function<double(int64_t)>& probe, double free_bytes, int sharing) {
  AutoBatchOptions ao;
  ao.fraction = r.breq.auto_fraction;
  ao.max_batch = std::min<int64_t>(has_own_memory(r.device) ? 8192 : 1024, r.train_set->size() / r.world);
  AutoBatchResult ab = auto_batch(probe, free_bytes, ao);
  int64_t per_rank = r.comm.all_reduce_min(ab.batch);  // the same batch on every rank: the smallest
  r.breq.global = per_rank * r.world * r.accumulate;   // with train.accumulate = N: N micro-batches per rank
  r.autobatch_target = ab.target_bytes;
  if (r.show)
    std::cout << ab.report()
              << (r.world > 1 ? " per rank" + std::string(sharing > 1 ? " (1/" + std::to_string(sharing) + " of the machine's free memory each)" : "") +
                                  "; global batch " + std::to_string(r.breq.global) + " over " + std::to_string(r.world) + " ranks"
                              : "")
              << "\n";
}

// AutoBatch (data.batch_size = -1, or train.accumulate = "auto"): probes this rank's device, then
// puts the buffers and the random generator back as they were.
void run_autobatch(ReplicaRun& r) {
  const ImageShape shape = r.dcfg.transforms(Split::train).output_shape(r.train_set->image_shape());
  std::map<std::string, Tensor> saved;
  for (auto& [n, t] : r.model->named_buffers()) saved[n] = t.detach().clone();
  RngState rng = default_generator().state();
  const std::function<double(int64_t)> probe = memory_probe(r, shape);
  double free_bytes = free_memory_bytes(r.device);
  // The probes measure this rank's batch on this rank's device. A GPU is the rank's own; CPU ranks
  // of one machine share its RAM, so each plans with its share of what is free.
  // Ranks that compute in the host's memory share it (every rank of this machine); a GPU's is its own.
  const int sharing = has_own_memory(r.device) ? 1 : (launched_by_mpirun() ? local_size() : r.world);
  free_bytes /= sharing;
  BenchmarkOff benchmark_off(r.device);
  if (r.accumulate == 0) choose_accumulation(r, probe, free_bytes);
  else choose_batch(r, probe, free_bytes, sharing);
  for (auto& [n, t] : r.model->named_buffers()) copy_tensor(t, saved[n]);
  default_generator().set_state(rng);
}

// This rank's loaders of the global batch, the steps of an epoch, the schedule.
void make_loaders(ReplicaRun& r) {
  KILN_CHECK(r.breq.global % r.world == 0, "data.batch_size = ", r.breq.global,
             " is the global batch and must divide by the ", r.world, " ranks");
  check_accumulation(r.breq.global, r.world, r.accumulate);
  r.dcfg.loader.batch_size = r.breq.global / r.world;
  Shard shard{r.rank, r.world};
  LoaderOptions topt = r.dcfg.loader_options(Split::train);
  if (r.upload_u8) topt.dtype = "u8";  // data.upload: bytes to the device (batch_images.h)
  r.train_loader = std::make_unique<DataLoader>(r.train_set, r.dcfg.train_transforms, topt, shard);
  r.train_loader->set_progressive_resize(r.dcfg.progressive_resize);
  r.vopt = r.dcfg.loader_options(Split::val);
  if (r.dcfg.val_batch_size == 0) r.vopt.batch_size = r.dcfg.loader.batch_size;
  if (r.upload_u8) r.vopt.dtype = "u8";
  r.val_loader = std::make_unique<DataLoader>(r.val_set, r.dcfg.val_transforms, r.vopt, shard);
  r.steps_per_epoch = r.train_loader->batches_per_epoch();
  if (r.opt.max_steps_per_epoch > 0) r.steps_per_epoch = std::min(r.steps_per_epoch, r.opt.max_steps_per_epoch);
  KILN_CHECK(r.steps_per_epoch > 0, "data: the training split has ", r.train_set->size(),
             " samples, fewer than one batch of ", r.dcfg.loader.batch_size, " per rank");
  r.sctx = ScheduleContext{r.optimizer->lr(), r.steps_per_epoch, r.opt.epochs};
  r.schedule = make_schedule(r.s.schedule, r.sctx, "schedule");
}

}  // namespace

void plan_batch(ReplicaRun& r) {
  // train.accumulate = "auto" (0): AutoBatch measures the largest micro-batch for the fixed batch.
  r.accumulate = r.opt.accumulate;
  KILN_CHECK(r.accumulate != 0 || r.breq.auto_fraction == 0, "config: train.accumulate = \"auto\" needs a fixed "
             "data.batch_size (the global batch to reach), not AutoBatch's; accepted: a data.batch_size > 0 with "
             "train.accumulate = \"auto\", or data.batch_size = -1 with train.accumulate = N (global batch = "
             "AutoBatch's micro-batch x ranks x N)");
  r.upload_u8 = r.dcfg.upload_u8(has_own_memory(r.device), r.opt.mixup.enabled());
  if (r.breq.auto_fraction > 0 || r.accumulate == 0) run_autobatch(r);
  make_loaders(r);
}

// --- open or resume ---------------------------------------------------------------------------------

namespace {

// Changes the run's epochs (train.time_budget_minutes' decision, or on resume the checkpoint's):
// the schedule follows, and so does the config as run.
void set_epochs(ReplicaRun& r, int64_t n) {
  r.opt.epochs = n;
  r.opt.time_budget_minutes = 0;  // decided: the config as run is the run with these epochs
  r.sctx.epochs = n;
  r.schedule = make_schedule(r.s.schedule, r.sctx, "schedule");
  r.as_run["train"]["epochs"] = n;
  r.as_run["train"]["time_budget_minutes"] = 0;
}

// The config as run: every section as the run reads it, with AutoBatch's choices.
void record_as_run(ReplicaRun& r) {
  r.as_run = r.config;
  r.as_run["train"] = r.opt.to_json();
  r.as_run["data"] = r.dcfg.to_json();
  // data.seed as given: the loaders mix train.seed into it (build_model_and_data), and a run resumed
  // from its config.json (kiln train RUN) mixes it again from what is recorded here.
  r.as_run["data"]["seed"] = r.data_seed_given;
  r.as_run["data"]["batch_size"] = r.breq.global;
  r.as_run["train"]["accumulate"] = r.accumulate;  // "auto"'s choice
  r.as_run["train"]["threads"] = r.result.threads;        // the number used (train.threads, OMP_NUM_THREADS or OpenMP's)
  r.as_run["model"] = r.model->to_json();
  r.as_run["optim"] = r.optimizer->to_json();
  r.as_run["schedule"] = r.schedule->to_json();
  r.as_run["kiln_version"] = kiln_version();
  // Keys that shape this invocation only are not the run's: a resume (kiln train RUN) of a run that
  // train.stop_after ended continues it (run_history.h's invocation_only_key).
  r.as_run["train"]["stop_after"] = 0;
  r.as_run["train"]["resume"] = "";
  r.state.config = r.as_run;
}

// A mid-epoch checkpoint (TrainingState::epoch_step > 0): where its epoch resumes, checked against
// this run's epoch (the same steps per epoch: the same batch and data); the run's seconds so far.
void resume_position(ReplicaRun& r, const std::string& base) {
  const std::map<std::string, double>& p = r.state.progress;
  r.seconds_before = p.count("run_seconds") ? std::max(0.0, p.at("run_seconds")) : 0.0;
  r.first_batch = r.state.epoch_step;
  r.resumed_progress = p;
  if (r.first_batch == 0) return;
  const double saved = p.count("steps_per_epoch") ? p.at("steps_per_epoch") : -1;
  KILN_CHECK(saved == static_cast<double>(r.steps_per_epoch), "resume: ", base, " was saved at batch ", r.first_batch,
             " of an epoch of ", saved, " steps, but this run's epochs have ", r.steps_per_epoch, " steps (data.batch_size ",
             r.breq.global, ", train.max_steps_per_epoch ", r.opt.max_steps_per_epoch,
             "); resume with the run's own data.batch_size and data (kiln train ", r.run_dir,
             "), or from a checkpoint saved at an epoch's end");
}

// "resumed runs/x/last-300 at step 300: epoch 2 of 3 from batch 101 of 300" (epochs and batches
// counted from 1, as the progress lines count them).
std::string resume_banner(const ReplicaRun& r, const std::string& base) {
  const int64_t e = r.state.epoch, b = r.first_batch, n = r.steps_per_epoch;
  std::string where;
  if (b == 0) where = "after epoch " + std::to_string(e) + " of " + std::to_string(r.opt.epochs);
  else if (b >= n) where = "epoch " + std::to_string(e + 1) + " of " + std::to_string(r.opt.epochs) + " trained, its evaluation next";
  else where = "epoch " + std::to_string(e + 1) + " of " + std::to_string(r.opt.epochs) + " from batch " +
               std::to_string(b + 1) + " of " + std::to_string(n);
  return "resumed " + checkpoint_pair_path(base) + " at step " + std::to_string(r.state.step) + ": " + where;
}

// The checkpoint loaded; a failure (the model's shapes) names the model keys this invocation changed
// from the run's config.json.
TrainingState load_checkpoint_naming_changes(ReplicaRun& r, const std::string& base) {
  try {
    return load_checkpoint(base, *r.model, r.ema ? r.ema->model.get() : nullptr);
  } catch (const Error& e) {
    json before;
    try {
      before = load_config_file(r.run_dir + "/config.json");
    } catch (const Error&) {
      throw e;
    }
    std::string model_keys;
    for (const auto& [k, v] : changed_keys(before, r.as_run))
      if (k.rfind("model.", 0) == 0) model_keys += (model_keys.empty() ? "" : ", ") + k + " (" + v.first.dump() + " -> " + v.second.dump() + ")";
    if (model_keys.empty()) throw;
    KILN_FAIL(e.what(), "; this resume changed ", model_keys,
              ", which changes the checkpoint's shapes: resume with the run's own model keys, or start a new run "
              "(kiln train CONFIG train.init=", r.run_dir, " to start from its weights)");
  }
}

// The keys this invocation changed from the checkpoint's config as run that a mid-epoch checkpoint
// cannot honour (the data's order and position), refused naming them.
void refuse_mid_epoch_changes(const ReplicaRun& r, const std::string& base) {
  const std::string where = checkpoint_pair_path(base) + " (epoch " + std::to_string(r.state.epoch + 1) + ", after batch " +
                            std::to_string(r.state.epoch_step) + ")";
  const std::string refusal = resume_refusal(changed_keys(r.state.config, r.as_run), r.state.epoch_step > 0, where);
  KILN_CHECK(refusal.empty(), refusal);
}

// The keys this invocation changed from the checkpoint's config as run, printed and kept for
// invocations.jsonl.
void note_changes(ReplicaRun& r) {
  const auto changed = changed_keys(r.state.config, r.as_run);
  r.changed = json::object();
  for (const auto& [k, v] : changed) r.changed[k] = json::array({v.first, v.second});
  if (r.show && !changed.empty())
    std::cout << "resume: " << changed.size() << " key(s) changed from the run's config as run "
              << "(recorded in " << r.run_dir << "/invocations.jsonl):\n" << describe_changes(changed);
}

// The checkpoint's records of train.best_metric and train.early_stopping (tools/engine/metric_watch.h)
// for this run's options: a record of another metric starts again (and says so); a run that early
// stopping ended is refused while it would stop again at once, else it trains on and says why. A
// record of early stopping switched off is dropped (switched on again later, it starts afresh).
void resume_records(ReplicaRun& r) {
  TrainingState& st = r.state;
  const EarlyStoppingOptions& es = r.opt.early_stopping;
  if (!st.best.metric.empty() && st.best.metric != r.opt.best_metric) {
    if (r.show)
      std::cout << "best: train.best_metric is \"" << r.opt.best_metric << "\", the checkpoint's best was chosen by \""
                << st.best.metric << "\": best is chosen anew from the next evaluation\n";
    st.best = MetricRecord{};
  }
  if (es.enabled() && !st.early_stopping.metric.empty() && st.early_stopping.metric != es.metric) {
    if (r.show)
      std::cout << "early stopping: watches " << metric_label(es.metric) << " from the next evaluation (the checkpoint "
                << "watched " << metric_label(st.early_stopping.metric) << ")\n";
    st.early_stopping = MetricRecord{};
  }
  if (st.stopped_early > 0) {
    const int64_t since = epochs_without_improvement(st.early_stopping, st.epoch);
    KILN_CHECK(!early_stop_due(es, st.early_stopping, st.epoch), "resume: ", r.run_dir, " stopped early after epoch ",
               st.stopped_early, " of ", r.opt.epochs, ": ", early_stop_reason(es, st.early_stopping, st.epoch),
               ", and would stop again; to train on, raise the patience above ", since, " (kiln train ", r.run_dir,
               " train.early_stopping.patience=", since + es.patience, ") or drop early stopping (kiln train ", r.run_dir,
               " train.early_stopping=null)");
    if (r.show)
      std::cout << "early stopping: " << r.run_dir << " had stopped after epoch " << st.stopped_early << "; "
                << (es.enabled() ? "with train.early_stopping.patience = " + std::to_string(es.patience) + " it trains on"
                                 : "train.early_stopping is off: it trains on") << "\n";
    st.stopped_early = 0;
  }
  if (!es.enabled()) st.early_stopping = MetricRecord{};
}

// train.resume: the checkpoint's weights (and EMA), optimizer state, generator and step; its run
// folder is the run's. Under a time budget the checkpoint's epochs are kept (decided at its start).
void resume(ReplicaRun& r) {
  const TrainOptions& opt = r.opt;
  // One writer: the lock before anything of the run folder is read (rank 0 writes it); a live
  // writer's run may have no checkpoint yet, and its refusal is the one to give.
  if (r.lead && is_run_folder(opt.resume)) r.lock = std::make_unique<RunLock>(opt.resume);
  std::string base = resolve_checkpoint(opt.resume);
  r.run_dir = fs::path(base).parent_path().string();
  if (r.lead && !r.lock) r.lock = std::make_unique<RunLock>(r.run_dir);
  r.state = load_checkpoint_naming_changes(r, base);
  if (r.ema && !r.state.ema_loaded) {  // EMA switched on for a run that had none: it starts here
    r.ema->ema->reset_to_live();
    if (r.show) std::cout << "ema: the checkpoint has no EMA weights; the average starts from its weights\n";
  }
  r.optimizer->load_state_dict(r.state.optimizer);
  default_generator().set_state(r.state.rng);
  refuse_mid_epoch_changes(r, base);
  resume_position(r, base);
  resume_records(r);
  // A budget not decided yet when the checkpoint was saved (mid-way through the first epoch, whose
  // config as run still has it) is decided in this invocation (start_budget).
  const json saved_train = r.state.config.value("train", json::object());
  const bool budget_undecided = saved_train.is_object() && saved_train.value("time_budget_minutes", 0.0) > 0;
  const bool budget_decided_on_resume = opt.time_budget_minutes > 0 && !budget_undecided;
  if (budget_decided_on_resume) {
    // The budget was decided in the run's first epoch; a resumed run keeps the epochs its
    // checkpoint was trained for (its schedule), whatever time is left.
    const json t = r.state.config.value("train", json::object());
    const json e = t.is_object() ? t.value("epochs", json()) : json();
    KILN_CHECK(e.is_number_integer() && e.get<int64_t>() >= 1, "resume: ", base,
               " does not record its train.epochs, which train.time_budget_minutes needs to continue its schedule");
    set_epochs(r, e.get<int64_t>());
    if (r.show)
      std::cout << "time budget: resumed runs keep the checkpoint's " << opt.epochs << " epochs (decided at its start)\n";
  }
  KILN_CHECK(r.state.epoch < opt.epochs, "resume: ", base, " has finished ", r.state.epoch,
             " epochs and train.epochs is ", opt.epochs,
             budget_decided_on_resume ? " (decided by train.time_budget_minutes at the run's start; drop the budget and "
                                        "ask for more epochs, epochs=N, to continue)"
                                      : "; ask for more epochs (epochs=N) to continue");
  note_changes(r);
  r.state.config = r.as_run;
  if (r.show) std::cout << resume_banner(r, base) << "\n";
}

// Rank 0: the run folder's config.json, classes.json and metrics log, and the run's first line.
void open_run_folder(ReplicaRun& r) {
  write_file_atomically(r.run_dir + "/config.json", r.as_run.dump(2) + "\n");
  save_class_names(r.run_dir + "/classes.json", r.train_set->class_names());  // kiln predict's (tools/deploy/predict.h)
  // tools/engine/console_log.h: this invocation's header line, then also what was printed before.
  attach_console_log(r.run_dir + "/train.log", invocation_header());
  append_invocation(r.run_dir, json{{"event", "start"}, {"kiln_version", kiln_version()},
                                     {"command", process_command_line()}, {"pid", static_cast<int64_t>(::getpid())},
                                     {"resumed", r.opt.resume.empty() ? json() : json(checkpoint_pair_path(resolve_checkpoint(r.opt.resume)))},
                                     {"step", r.state.step}, {"epoch", r.state.epoch}, {"epoch_step", r.state.epoch_step},
                                     {"changed", r.changed}});
  set_second_signal_note(r.opt.resume.empty() ? "nothing of this run is saved yet"
                                              : "kiln train " + r.run_dir + " resumes it from step " +
                                                    std::to_string(r.state.step) + ", as this invocation did");
  // A resumed run's logs lose the rows past its checkpoint's step; TensorBoard is told likewise.
  r.log = std::make_unique<MetricsLog>(r.run_dir, r.opt.resume.empty() ? -1 : r.state.step, r.opt.tensorboard);
  if (!r.show) return;
  int64_t trainable = 0;  // scalars; fewer than the model's when train.freeze holds some
  for (const ParamRef& p : r.params) trainable += p.param.numel();
  std::cout << "kiln: " << r.s.name << " on " << r.device.str()
            << (r.world > 1 ? " x" + std::to_string(r.world) + " ranks" : "") << ", " << r.model->num_parameters()
            << " parameters" << (trainable < r.model->num_parameters() ? " (" + std::to_string(trainable) + " trainable)" : "")
            << ", batch " << r.breq.global << ", " << r.steps_per_epoch << " steps/epoch"
            << (r.accumulate > 1 ? " of " + std::to_string(r.accumulate) + " micro-batches" : std::string()) << ", "
            << r.result.threads << " CPU threads" << (r.threads_from.empty() ? std::string() : " (" + r.threads_from + ")")
            << (r.ema ? ", EMA " + r.ema->ema->options().to_json().dump() : std::string()) << " -> " << r.run_dir
            << "\n";
  if (!native_compute(r.device, r.compute))
    std::cout << "kiln: note: " << r.device.str() << " has no native " << dtype_name(r.compute)
              << " convolutions (a CPU without AVX-512 BF16 or AMX): they run in f32 with conversions, usually "
              << "slower than train.precision=fp32 (docs/precision.md)\n";
}

// The training step's setup (make_step_setup): the all-reduce over several ranks; with fp16 the loss
// scaler, whose state continues from the checkpoint on resume.
void make_run_step(ReplicaRun& r) {
  if (r.world > 1) {
    std::vector<Tensor> ps;
    for (auto& p : r.params) ps.push_back(p.param);
    r.sync = std::make_unique<GradSync>(ps, r.comm);
  }
  StepOptions so = step_options(r.opt);
  so.class_weights = r.class_weights;
  so.accumulate = r.accumulate;
  so.sync = r.sync.get();
  r.step = make_step_setup(so, r.device, *r.optimizer);
  if (r.step.scaler && !r.state.scaler.empty()) r.step.scaler->load_state_dict(r.state.scaler);
}

// train.time_budget_minutes: when this invocation decides the epochs (a resumed run has decided).
// A run resumed before the decision (a mid-epoch checkpoint of its first epoch) decides it here,
// counting from the resumed step, with the seconds before it in the elapsed time.
void start_budget(ReplicaRun& r) {
  BudgetState& b = r.budget;
  b.minutes = r.opt.time_budget_minutes;
  b.pending = b.minutes > 0;  // resume() zeroed a budget decided before
  const int64_t decide = b.pending ? budget_decision_step(r.steps_per_epoch) : 0;
  b.decide_at = b.pending ? r.state.step + decide : 0;
  b.mark_at = b.pending ? r.state.step + std::min(kUntimedSteps, std::max<int64_t>(0, decide - 1)) : 0;
  b.mark_time = Clock::now();
}

}  // namespace

void open_run(ReplicaRun& r) {
  record_as_run(r);
  if (!r.opt.resume.empty()) {
    resume(r);
  } else if (r.lead) {
    r.run_dir = make_run_dir(r.opt.runs_dir, r.s.name);
    r.lock = std::make_unique<RunLock>(r.run_dir);  // a new folder: nobody else can hold it yet
  }
  r.last_epoch = r.opt.stop_after > 0 ? std::min(r.opt.stop_after, r.opt.epochs) : r.opt.epochs;
  KILN_CHECK(r.state.epoch < r.last_epoch, "train.stop_after = ", r.opt.stop_after, ": ", r.run_dir, " has trained ",
             r.state.epoch, " epoch(s) already, so this invocation would train nothing; give a larger train.stop_after "
             "(at most train.epochs = ", r.opt.epochs, "), or none to train to the end");
  if (r.lead) open_run_folder(r);
  make_run_step(r);
  r.result.run_dir = r.run_dir;
  r.result.batch = r.breq.global;
  r.result.accumulate = r.accumulate;
  r.result.autobatch_target_bytes = r.autobatch_target;
  CachingAllocator& device_alloc = allocator_for(r.device);
  device_alloc.reset_peak();
  r.weights_bytes = device_alloc.stats().allocated;
  r.tty = Progress::stdout_is_tty();
  r.num_classes = r.train_set->num_classes();
  start_budget(r);
  r.first_epoch = r.state.epoch;
  r.last_lr = r.schedule->lr_at(std::max<int64_t>(0, r.state.step - 1));  // the checkpoint's last step's
  r.last_save = Clock::now();
  // Over several ranks, signals are agreed on every 8 steps (one small all-reduce that waits for the
  // device); alone, every step at no cost (tools/engine/interrupt.h).
  r.poll_every = r.world > 1 ? 8 : 1;
}

void adopt_epochs(ReplicaRun& r, int64_t n) {
  set_epochs(r, n);
  r.last_epoch = r.opt.stop_after > 0 ? std::min(r.opt.stop_after, r.opt.epochs) : r.opt.epochs;
  r.state.config = r.as_run;
  if (r.lead) write_file_atomically(r.run_dir + "/config.json", r.as_run.dump(2) + "\n");  // the run as it runs
}

// --- finish -----------------------------------------------------------------------------------------

TrainResult interrupt_run(ReplicaRun& r) {
  if (r.lead && r.opt.plots && r.log) r.log->save_plots(r.run_dir);
  if (r.show)
    std::cout << "kiln: " << signal_name(r.interrupted) << ": stopped at step " << r.state.step << " (epoch "
              << r.state.epoch + 1 << " of " << r.opt.epochs << ", batch " << r.state.epoch_step << " of "
              << r.steps_per_epoch << "); saved " << r.run_dir << "/last\n"
              << "resume with: kiln train " << r.run_dir << "\n";
  if (r.lead)
    append_invocation(r.run_dir, json{{"event", "end"}, {"outcome", std::string("stopped by ") + signal_name(r.interrupted)},
                                      {"step", r.state.step}, {"epoch", r.state.epoch}, {"epoch_step", r.state.epoch_step}});
  r.result.interrupted = r.interrupted;
  r.result.epochs = r.opt.epochs;
  r.result.steps = r.state.step;
  r.comm.barrier();
  return r.result;
}

TrainResult finish_run(ReplicaRun& r) {
  const TrainOptions& opt = r.opt;
  // train.tta: the last evaluation again with test-time augmentation; its numbers are the result and
  // the report's (metrics.csv and the best checkpoint keep the plain evaluations).
  if (opt.tta != "none" && !r.final_confusion.empty()) {
    r.final_confusion.assign(r.num_classes, std::vector<int64_t>(r.num_classes, 0));
    EvalCounts ec = run_eval(*r.model, *r.val_loader, r.device, r.compute, r.last_epoch - 1, r.num_classes,
                             &r.final_confusion, opt.tta);
    all_reduce_confusion(r.comm, r.final_confusion);
    publish_eval(r, ec, "tta=" + opt.tta);
    if (r.ema) {  // and the EMA weights, whose figures are the result's ema_val_*
      EvalCounts ee = run_eval(*r.ema->model, *r.val_loader, r.device, r.compute, r.last_epoch - 1, r.num_classes,
                               nullptr, opt.tta);
      publish(r, ee, "ema", "tta=" + opt.tta, r.result.ema_val_loss, r.result.ema_val_top1, r.result.ema_val_top5);
    }
  }
  if (r.show && r.state.best.epoch > 0)  // train.best_metric's choice (an earlier kiln's record has no epoch)
    std::cout << "best: epoch " << r.state.best.epoch << ", " << metric_label(r.state.best.metric) << " "
              << metric_text(r.state.best.metric, r.state.best.best) << " (train.best_metric) -> " << r.run_dir << "/best\n";
  if (r.lead && opt.plots && r.log) {
    r.log->save_plots(r.run_dir);  // also after every epoch (end_epoch); here the run's last word
    if (r.show) std::cout << "results in " << r.run_dir << "\n";
  }
  if (r.lead && !r.final_confusion.empty())
    write_run_report(r.run_dir, r.final_confusion, report_class_names(*r.val_set), r.show);
  r.result.epochs = opt.epochs;
  if (r.lead)
    append_invocation(r.run_dir, json{{"event", "end"}, {"outcome", r.result.stopped_early > 0          ? "stopped by train.early_stopping"
                                                    : r.last_epoch < opt.epochs ? "stopped by train.stop_after"
                                                                                : "finished"},
                                      {"step", r.state.step}, {"epoch", r.state.epoch}, {"val_top1", r.result.val_top1}});
  if (r.show && r.budget.minutes > 0)
    std::cout << "time budget " << fmt("%.4g", r.budget.minutes) << " min: the run took "
              << fmt("%.1f", seconds_since(r.start) / 60) << " min (" << fmt("%.0f", seconds_since(r.start))
              << " s) for " << r.last_epoch - r.first_epoch << " of " << opt.epochs << " epochs\n";
  r.comm.barrier();
  return r.result;
}

}  // namespace trainer

// One replica: trains `config` on `device` as rank comm.rank() of comm.size() (the whole job when
// the size is 1). Every replica runs these same phases (tools/engine/replica_run.h); train() and
// train_replicas() start them.
TrainResult train_replica(const json& config, bool quiet, Communicator& comm, Device device) {
  using namespace trainer;
  ReplicaRun r(comm, device, quiet);
  prepare_run(r, config);
  plan_batch(r);
  open_run(r);
  for (int64_t epoch = r.state.epoch; epoch < r.last_epoch && !r.interrupted; ++epoch) {
    const EpochOutcome e = run_epoch(r, epoch);
    if (!r.interrupted) end_epoch(r, epoch, e);
  }
  return r.interrupted ? interrupt_run(r) : finish_run(r);
}

void check_config(const json& config_in) {
  using namespace trainer;
  json config = config_in;
  KILN_CHECK(config.is_object(), "config: expected an object, got ", config.dump());
  BatchRequest breq = read_batch(config["data"], 0.6);
  config["data"]["batch_size"] = breq.auto_fraction > 0 ? 1 : breq.global;
  read_sections(config);
  DataConfig::from_json(config["data"], "data");
}

EvalResult evaluate(const json& config_in, const std::string& weights) {
  using namespace trainer;
  json config = config_in;
  BatchRequest breq = read_batch(config["data"], 0.6);
  config["data"]["batch_size"] = breq.auto_fraction > 0 ? 256 : breq.global;
  Sections s = read_sections(config);
  Device device = parse_device_list(s.train.device)[0];
  std::shared_ptr<Module> model = models::build_model(s.model, "model");
  load_weights(weights, *model);
  model->to(device);
  DataConfig dcfg = DataConfig::from_json(config["data"], "data");
  auto val_set = make_dataset(dcfg, Split::val);
  LoaderOptions vopt = dcfg.loader_options(Split::val);
  if (dcfg.upload_u8(has_own_memory(device), false)) vopt.dtype = "u8";  // data.upload (batch_images.h)
  DataLoader loader(val_set, dcfg.val_transforms, vopt, Shard{});
  EvalResult r;
  int64_t k = val_set->num_classes();
  r.confusion.assign(k, std::vector<int64_t>(k, 0));
  r.class_names = report_class_names(*val_set);
  EvalCounts c = run_eval(*model, loader, device, compute_dtype_of(s.train.precision, device), 0, k, &r.confusion, s.train.tta);
  r.samples = static_cast<int64_t>(c.samples);
  r.top1 = c.top1 / c.samples;
  r.top5 = c.top5 / c.samples;
  r.loss = c.loss_sum / c.samples;
  return r;
}

}  // namespace kiln
