// The training loop, as the phases of replica_run.h: prepare the run (ranks, device, model, data,
// optimizer), plan the batch (AutoBatch, accumulation: batch_plan.cpp), open or resume the run
// folder, then epochs (epoch.cpp) and the finish (TTA, plots, the report); also `kiln eval`'s
// evaluate().
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
#include "tools/engine/class_weights.h"
#include "tools/engine/console_log.h"
#include "tools/engine/metric_watch.h"
#include "tools/engine/evaluate.h"
#include "tools/engine/finetune.h"
#include "tools/engine/interrupt.h"
#include "tools/engine/metrics.h"
#include "tools/engine/mpi_comm.h"
#include "tools/engine/precision_probe.h"
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
void set_threads(const Replica& rep, RunConfig& cfg) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  const bool by_env = env != nullptr && *env != '\0';
  const long env_n = by_env ? std::strtol(env, nullptr, 10) : 0;  // "4" or "4,2" (nested levels): 4
  if (env_n > 0) omp_set_num_threads(static_cast<int>(env_n));
  else if (!by_env && cfg.opt().threads > 0) omp_set_num_threads(static_cast<int>(cfg.opt().threads));
  cfg.threads = omp_get_max_threads();
  cfg.threads_from = by_env ? "OMP_NUM_THREADS" : cfg.opt().threads > 0 ? "train.threads" : "";
  if (rep.show && by_env && cfg.opt().threads > 0 && cfg.threads != cfg.opt().threads)
    std::cout << "threads: OMP_NUM_THREADS=" << env << " overrides train.threads = " << cfg.opt().threads << ": "
              << cfg.threads << " CPU threads\n";
}

// The config's sections, the precision ("auto" is decided later: decide_auto_precision), the threads.
RunConfig read_run_config(const Replica& rep, const json& config_in) {
  RunConfig cfg;
  cfg.start = Clock::now();
  cfg.config = config_in;
  cfg.s = read_sections(cfg.config);
  cfg.breq = read_batch(cfg.config["data"], cfg.opt().autobatch_fraction);
  rep.comm.set_timeout(std::chrono::milliseconds(static_cast<int64_t>(cfg.opt().comm_timeout_s * 1000)));
  // "auto" is decided once the model and data are built (decide_auto_precision); f32 until then.
  cfg.compute = cfg.opt().precision == "auto" ? DType::f32 : compute_dtype_of(cfg.opt().precision, rep.device);
  set_threads(rep, cfg);
  set_conv_benchmark(rep.device, cfg.opt().cudnn_benchmark);  // cuDNN's on a GPU; the CPU has none
  return cfg;
}

// The model (train.init's weights), the data config and the datasets, checked before anything is
// allocated or written; the loss's class weights.
void build_model_and_data(const Replica& rep, RunConfig& cfg, RunData& data, Learner& learner) {
  const TrainOptions& opt = cfg.opt();
  manual_seed(static_cast<uint64_t>(opt.seed));
  learner.model = models::build_model(cfg.s.model, "model");
  if (!opt.init.empty() && opt.resume.empty()) load_init_weights(*learner.model, opt.init, opt.init_fresh, rep.show);
  else if (!opt.init.empty() && rep.show) std::cout << "init: not read: resuming, the checkpoint's weights are loaded\n";
  learner.model->to(rep.device);
  if (cfg.breq.auto_fraction > 0) cfg.config["data"]["batch_size"] = 1;  // validated below; chosen by AutoBatch
  else cfg.config["data"]["batch_size"] = cfg.breq.global;
  data.dcfg = DataConfig::from_json(cfg.config["data"], "data");
  data.data_seed_given = data.dcfg.loader.seed;
  data.dcfg.loader.seed = static_cast<uint64_t>(opt.seed) ^ data.dcfg.loader.seed;
  if (opt.time_budget_minutes > 0) {  // tools/engine/time_budget.h: what a budget can shorten
    const json sname = cfg.s.schedule.is_object() ? cfg.s.schedule.value("name", json("constant")) : json();
    KILN_CHECK(sname == "cosine" || sname == "constant", "train.time_budget_minutes = ", opt.time_budget_minutes,
               " needs a schedule whose length follows train.epochs (cosine, constant); schedule.name = ", sname.dump(),
               " has its steps at fixed epochs: set them for the epochs you want and drop the budget");
    KILN_CHECK(!data.dcfg.progressive_resize.enabled(), "train.time_budget_minutes = ", opt.time_budget_minutes,
               " cannot be used with data.progressive_resize, whose sizes change at fixed epochs");
  }
  data.train_set = make_dataset(data.dcfg, Split::train);
  data.val_set = make_dataset(data.dcfg, Split::val);
  // Before anything is allocated or written: the loaders' buffers fit, the model takes the images.
  check_before_run(*learner.model, data.dcfg, data.train_set->image_shape(),
                   cfg.breq.auto_fraction > 0 ? 1 : cfg.breq.global / rep.world, data.train_set->num_classes());
  data.num_classes = data.train_set->num_classes();
  learner.class_weights = loss_class_weights(opt, *data.train_set, rep.device, rep.show);
}

// The optimizer over the trainable parameters, rank 0's initial weights on every rank, the EMA.
void build_optimizer(const Replica& rep, const RunConfig& cfg, Learner& learner) {
  learner.params = trainable_params(*learner.model, cfg.opt().freeze, rep.show);
  mark_no_decay_1d(learner.params);
  learner.optimizer = make_optimizer(cfg.s.optim, learner.params, "optim");
  if (rep.world > 1) {  // rank 0's initial weights everywhere (also the buffers)
    for (auto& [n, t] : learner.model->named_parameters()) rep.comm.broadcast(t, 0);
    broadcast_buffers(rep.comm, *learner.model);
  }
  // EMA of the weights (optim/ema.h, tools/engine/train_ema.h): starts as a copy of the initial weights.
  learner.ema = make_training_ema(cfg.opt().ema, cfg.s.model, *learner.model, rep.device);
}

}  // namespace

Replica make_replica(Communicator& comm, Device device, bool quiet) {
  Replica rep{comm, device, quiet};
  rep.rank = comm.rank();
  rep.world = comm.size();
  rep.lead = rep.rank == 0;
  rep.show = rep.lead && !quiet;
  rep.tty = Progress::stdout_is_tty();
  rep.poll_every = rep.world > 1 ? 8 : 1;
  return rep;
}

Prepared prepare_run(const Replica& rep, const json& config) {
  Prepared p{read_run_config(rep, config), {}, {}};
  build_model_and_data(rep, p.cfg, p.data, p.learner);
  build_optimizer(rep, p.cfg, p.learner);
  decide_auto_precision(rep, p.cfg, p.data, p.learner);  // tools/engine/precision_probe.h
  // bf16 training: the loader writes bf16 batches (half the bytes to move); fp16 casts on the device.
  if (p.cfg.compute == DType::bf16) p.data.dcfg.loader.dtype = "bf16";
  return p;
}

// --- open or resume ---------------------------------------------------------------------------------

namespace {

// Changes the run's epochs (train.time_budget_minutes' decision, or on resume the checkpoint's):
// the schedule follows, and so does the config as run.
void set_epochs(RunConfig& cfg, Schedule& sched, RunFolder& folder, int64_t n) {
  cfg.opt().epochs = n;
  cfg.opt().time_budget_minutes = 0;  // decided: the config as run is the run with these epochs
  sched.context.epochs = n;
  sched.lr = make_schedule(cfg.s.schedule, sched.context, "schedule");
  folder.as_run["train"]["epochs"] = n;
  folder.as_run["train"]["time_budget_minutes"] = 0;
}

// The config as run: every section as the run reads it, with AutoBatch's choices.
json config_as_run(const RunConfig& cfg, const RunData& data, const Learner& learner, const BatchPlan& plan,
                   const Schedule& sched) {
  json as_run = cfg.config;
  as_run["train"] = cfg.opt().to_json();
  as_run["data"] = data.dcfg.to_json();
  // data.seed as given: the loaders mix train.seed into it (build_model_and_data), and a run resumed
  // from its config.json (kiln train RUN) mixes it again from what is recorded here.
  as_run["data"]["seed"] = data.data_seed_given;
  as_run["data"]["batch_size"] = cfg.breq.global;
  as_run["train"]["accumulate"] = plan.accumulate;  // "auto"'s choice
  as_run["train"]["threads"] = cfg.threads;        // the number used (train.threads, OMP_NUM_THREADS or OpenMP's)
  as_run["model"] = learner.model->to_json();
  as_run["optim"] = learner.optimizer->to_json();
  as_run["schedule"] = sched.lr->to_json();
  as_run["kiln_version"] = kiln_version();
  // Keys that shape this invocation only are not the run's: a resume (kiln train RUN) of a run that
  // train.stop_after ended continues it (run_history.h's invocation_only_key).
  as_run["train"]["stop_after"] = 0;
  as_run["train"]["resume"] = "";
  return as_run;
}

// A mid-epoch checkpoint (TrainingState::epoch_step > 0): where its epoch resumes, checked against
// this run's epoch (the same steps per epoch: the same batch and data); the run's seconds so far.
void resume_position(const RunConfig& cfg, const BatchPlan& plan, const RunFolder& folder, const RunProgress& prog,
                     RunSpan& span, const std::string& base) {
  const std::map<std::string, double>& p = prog.state.progress;
  span.seconds_before = p.count("run_seconds") ? std::max(0.0, p.at("run_seconds")) : 0.0;
  span.first_batch = prog.state.epoch_step;
  span.resumed_progress = p;
  if (span.first_batch == 0) return;
  const double saved = p.count("steps_per_epoch") ? p.at("steps_per_epoch") : -1;
  KILN_CHECK(saved == static_cast<double>(plan.steps_per_epoch), "resume: ", base, " was saved at batch ", span.first_batch,
             " of an epoch of ", saved, " steps, but this run's epochs have ", plan.steps_per_epoch, " steps (data.batch_size ",
             cfg.breq.global, ", train.max_steps_per_epoch ", cfg.opt().max_steps_per_epoch,
             "); resume with the run's own data.batch_size and data (kiln train ", folder.dir,
             "), or from a checkpoint saved at an epoch's end");
}

// "resumed runs/x/last-300 at step 300: epoch 2 of 3 from batch 101 of 300" (epochs and batches
// counted from 1, as the progress lines count them).
std::string resume_banner(const RunConfig& cfg, const BatchPlan& plan, const RunSpan& span, const RunProgress& prog,
                          const std::string& base) {
  const int64_t e = prog.state.epoch, b = span.first_batch, n = plan.steps_per_epoch;
  std::string where;
  if (b == 0) where = "after epoch " + std::to_string(e) + " of " + std::to_string(cfg.opt().epochs);
  else if (b >= n) where = "epoch " + std::to_string(e + 1) + " of " + std::to_string(cfg.opt().epochs) + " trained, its evaluation next";
  else where = "epoch " + std::to_string(e + 1) + " of " + std::to_string(cfg.opt().epochs) + " from batch " +
               std::to_string(b + 1) + " of " + std::to_string(n);
  return "resumed " + checkpoint_pair_path(base) + " at step " + std::to_string(prog.state.step) + ": " + where;
}

// The checkpoint loaded; a failure (the model's shapes) names the model keys this invocation changed
// from the run's config.json.
TrainingState load_checkpoint_naming_changes(Learner& learner, const RunFolder& folder, const std::string& base) {
  try {
    return load_checkpoint(base, *learner.model, learner.ema ? learner.ema->model.get() : nullptr);
  } catch (const Error& e) {
    json before;
    try {
      before = load_config_file(folder.dir + "/config.json");
    } catch (const Error&) {
      throw e;
    }
    std::string model_keys;
    for (const auto& [k, v] : changed_keys(before, folder.as_run))
      if (k.rfind("model.", 0) == 0) model_keys += (model_keys.empty() ? "" : ", ") + k + " (" + v.first.dump() + " -> " + v.second.dump() + ")";
    if (model_keys.empty()) throw;
    KILN_FAIL(e.what(), "; this resume changed ", model_keys,
              ", which changes the checkpoint's shapes: resume with the run's own model keys, or start a new run "
              "(kiln train CONFIG train.init=", folder.dir, " to start from its weights)");
  }
}

// The keys this invocation changed from the checkpoint's config as run that a mid-epoch checkpoint
// cannot honour (the data's order and position), refused naming them.
void refuse_mid_epoch_changes(const RunProgress& prog, const RunFolder& folder, const std::string& base) {
  const std::string where = checkpoint_pair_path(base) + " (epoch " + std::to_string(prog.state.epoch + 1) + ", after batch " +
                            std::to_string(prog.state.epoch_step) + ")";
  const std::string refusal = resume_refusal(changed_keys(prog.state.config, folder.as_run), prog.state.epoch_step > 0, where);
  KILN_CHECK(refusal.empty(), refusal);
}

// The keys this invocation changed from the checkpoint's config as run, printed and kept for
// invocations.jsonl.
void note_changes(const Replica& rep, const RunProgress& prog, RunFolder& folder) {
  const auto changed = changed_keys(prog.state.config, folder.as_run);
  folder.changed = json::object();
  for (const auto& [k, v] : changed) folder.changed[k] = json::array({v.first, v.second});
  if (rep.show && !changed.empty())
    std::cout << "resume: " << changed.size() << " key(s) changed from the run's config as run "
              << "(recorded in " << folder.dir << "/invocations.jsonl):\n" << describe_changes(changed);
}

// The checkpoint's records of train.best_metric and train.early_stopping (tools/engine/metric_watch.h)
// for this run's options: a record of another metric starts again (and says so); a run that early
// stopping ended is refused while it would stop again at once, else it trains on and says why. A
// record of early stopping switched off is dropped (switched on again later, it starts afresh).
void resume_records(const Replica& rep, const RunConfig& cfg, const RunFolder& folder, RunProgress& prog) {
  TrainingState& st = prog.state;
  const EarlyStoppingOptions& es = cfg.opt().early_stopping;
  if (!st.best.metric.empty() && st.best.metric != cfg.opt().best_metric) {
    if (rep.show)
      std::cout << "best: train.best_metric is \"" << cfg.opt().best_metric << "\", the checkpoint's best was chosen by \""
                << st.best.metric << "\": best is chosen anew from the next evaluation\n";
    st.best = MetricRecord{};
  }
  if (es.enabled() && !st.early_stopping.metric.empty() && st.early_stopping.metric != es.metric) {
    if (rep.show)
      std::cout << "early stopping: watches " << metric_label(es.metric) << " from the next evaluation (the checkpoint "
                << "watched " << metric_label(st.early_stopping.metric) << ")\n";
    st.early_stopping = MetricRecord{};
  }
  if (st.stopped_early > 0) {
    const int64_t since = epochs_without_improvement(st.early_stopping, st.epoch);
    KILN_CHECK(!early_stop_due(es, st.early_stopping, st.epoch), "resume: ", folder.dir, " stopped early after epoch ",
               st.stopped_early, " of ", cfg.opt().epochs, ": ", early_stop_reason(es, st.early_stopping, st.epoch),
               ", and would stop again; to train on, raise the patience above ", since, " (kiln train ", folder.dir,
               " train.early_stopping.patience=", since + es.patience, ") or drop early stopping (kiln train ", folder.dir,
               " train.early_stopping=null)");
    if (rep.show)
      std::cout << "early stopping: " << folder.dir << " had stopped after epoch " << st.stopped_early << "; "
                << (es.enabled() ? "with train.early_stopping.patience = " + std::to_string(es.patience) + " it trains on"
                                 : "train.early_stopping is off: it trains on") << "\n";
    st.stopped_early = 0;
  }
  if (!es.enabled()) st.early_stopping = MetricRecord{};
}

// train.resume: the checkpoint's weights (and EMA), optimizer state, generator and step; its run
// folder is the run's. Under a time budget the checkpoint's epochs are kept (decided at its start).
void resume(const Replica& rep, RunConfig& cfg, Learner& learner, const BatchPlan& plan, Schedule& sched,
            RunFolder& folder, RunSpan& span, RunProgress& prog) {
  const TrainOptions& opt = cfg.opt();
  // One writer: the lock before anything of the run folder is read (rank 0 writes it); a live
  // writer's run may have no checkpoint yet, and its refusal is the one to give.
  if (rep.lead && is_run_folder(opt.resume)) folder.lock = std::make_unique<RunLock>(opt.resume);
  std::string base = resolve_checkpoint(opt.resume);
  folder.dir = fs::path(base).parent_path().string();
  if (rep.lead && !folder.lock) folder.lock = std::make_unique<RunLock>(folder.dir);
  prog.state = load_checkpoint_naming_changes(learner, folder, base);
  if (learner.ema && !prog.state.ema_loaded) {  // EMA switched on for a run that had none: it starts here
    learner.ema->ema->reset_to_live();
    if (rep.show) std::cout << "ema: the checkpoint has no EMA weights; the average starts from its weights\n";
  }
  learner.optimizer->load_state_dict(prog.state.optimizer);
  default_generator().set_state(prog.state.rng);
  refuse_mid_epoch_changes(prog, folder, base);
  resume_position(cfg, plan, folder, prog, span, base);
  resume_records(rep, cfg, folder, prog);
  // A budget not decided yet when the checkpoint was saved (mid-way through the first epoch, whose
  // config as run still has it) is decided in this invocation (start_budget).
  const json saved_train = prog.state.config.value("train", json::object());
  const bool budget_undecided = saved_train.is_object() && saved_train.value("time_budget_minutes", 0.0) > 0;
  const bool budget_decided_on_resume = opt.time_budget_minutes > 0 && !budget_undecided;
  if (budget_decided_on_resume) {
    // The budget was decided in the run's first epoch; a resumed run keeps the epochs its
    // checkpoint was trained for (its schedule), whatever time is left.
    const json t = prog.state.config.value("train", json::object());
    const json e = t.is_object() ? t.value("epochs", json()) : json();
    KILN_CHECK(e.is_number_integer() && e.get<int64_t>() >= 1, "resume: ", base,
               " does not record its train.epochs, which train.time_budget_minutes needs to continue its schedule");
    set_epochs(cfg, sched, folder, e.get<int64_t>());
    if (rep.show)
      std::cout << "time budget: resumed runs keep the checkpoint's " << opt.epochs << " epochs (decided at its start)\n";
  }
  KILN_CHECK(prog.state.epoch < opt.epochs, "resume: ", base, " has finished ", prog.state.epoch,
             " epochs and train.epochs is ", opt.epochs,
             budget_decided_on_resume ? " (decided by train.time_budget_minutes at the run's start; drop the budget and "
                                        "ask for more epochs, epochs=N, to continue)"
                                      : "; ask for more epochs (epochs=N) to continue");
  note_changes(rep, prog, folder);
  prog.state.config = folder.as_run;
  if (rep.show) std::cout << resume_banner(cfg, plan, span, prog, base) << "\n";
}

// Rank 0: the run folder's config.json, classes.json and metrics log, and the run's first line.
void open_run_folder(const Replica& rep, const RunConfig& cfg, const RunData& data, const Learner& learner,
                     const BatchPlan& plan, RunFolder& folder, const RunProgress& prog) {
  write_file_atomically(folder.dir + "/config.json", folder.as_run.dump(2) + "\n");
  save_class_names(folder.dir + "/classes.json", data.train_set->class_names());  // kiln predict's (tools/deploy/predict.h)
  // tools/engine/console_log.h: this invocation's header line, then also what was printed before.
  attach_console_log(folder.dir + "/train.log", invocation_header());
  append_invocation(folder.dir, json{{"event", "start"}, {"kiln_version", kiln_version()},
                                     {"command", process_command_line()}, {"pid", static_cast<int64_t>(::getpid())},
                                     {"resumed", cfg.opt().resume.empty() ? json() : json(checkpoint_pair_path(resolve_checkpoint(cfg.opt().resume)))},
                                     {"step", prog.state.step}, {"epoch", prog.state.epoch}, {"epoch_step", prog.state.epoch_step},
                                     {"changed", folder.changed}});
  set_second_signal_note(cfg.opt().resume.empty() ? "nothing of this run is saved yet"
                                              : "kiln train " + folder.dir + " resumes it from step " +
                                                    std::to_string(prog.state.step) + ", as this invocation did");
  // A resumed run's logs lose the rows past its checkpoint's step; TensorBoard is told likewise.
  folder.log = std::make_unique<MetricsLog>(folder.dir, cfg.opt().resume.empty() ? -1 : prog.state.step, cfg.opt().tensorboard);
  if (!rep.show) return;
  int64_t trainable = 0;  // scalars; fewer than the model's when train.freeze holds some
  for (const ParamRef& p : learner.params) trainable += p.param.numel();
  std::cout << "kiln: " << cfg.s.name << " on " << rep.device.str()
            << (rep.world > 1 ? " x" + std::to_string(rep.world) + " ranks" : "") << ", " << learner.model->num_parameters()
            << " parameters" << (trainable < learner.model->num_parameters() ? " (" + std::to_string(trainable) + " trainable)" : "")
            << ", batch " << cfg.breq.global << ", " << plan.steps_per_epoch << " steps/epoch"
            << (plan.accumulate > 1 ? " of " + std::to_string(plan.accumulate) + " micro-batches" : std::string()) << ", "
            << prog.result.threads << " CPU threads" << (cfg.threads_from.empty() ? std::string() : " (" + cfg.threads_from + ")")
            << (learner.ema ? ", EMA " + learner.ema->ema->options().to_json().dump() : std::string()) << " -> " << folder.dir
            << "\n";
  if (!native_compute(rep.device, cfg.compute))
    std::cout << "kiln: note: " << rep.device.str() << " has no native " << dtype_name(cfg.compute)
              << " convolutions (a CPU without AVX-512 BF16 or AMX): they run in f32 with conversions, usually "
              << "slower than train.precision=fp32 (docs/precision.md)\n";
}

// The training step's setup (make_step_setup): the all-reduce over several ranks; with fp16 the loss
// scaler, whose state continues from the checkpoint on resume.
void make_run_step(const Replica& rep, const RunConfig& cfg, const Learner& learner, const BatchPlan& plan,
                   const RunProgress& prog, RunStep& step) {
  if (rep.world > 1) {
    std::vector<Tensor> ps;
    for (auto& p : learner.params) ps.push_back(p.param);
    step.sync = std::make_unique<GradSync>(ps, rep.comm);
  }
  StepOptions so = step_options(cfg.opt());
  so.class_weights = learner.class_weights;
  so.accumulate = plan.accumulate;
  so.sync = step.sync.get();
  step.setup = make_step_setup(so, rep.device, *learner.optimizer);
  if (step.setup.scaler && !prog.state.scaler.empty()) step.setup.scaler->load_state_dict(prog.state.scaler);
}

// train.time_budget_minutes: when this invocation decides the epochs (a resumed run has decided).
// A run resumed before the decision (a mid-epoch checkpoint of its first epoch) decides it here,
// counting from the resumed step, with the seconds before it in the elapsed time.
BudgetState start_budget(const RunConfig& cfg, const BatchPlan& plan, const RunProgress& prog) {
  BudgetState b;
  b.minutes = cfg.opt().time_budget_minutes;
  b.pending = b.minutes > 0;  // resume() zeroed a budget decided before
  const int64_t decide = b.pending ? budget_decision_step(plan.steps_per_epoch) : 0;
  b.decide_at = b.pending ? prog.state.step + decide : 0;
  b.mark_at = b.pending ? prog.state.step + std::min(kUntimedSteps, std::max<int64_t>(0, decide - 1)) : 0;
  b.mark_time = Clock::now();
  return b;
}

}  // namespace

Opened open_run(const Replica& rep, RunConfig& cfg, const RunData& data, Learner& learner, const BatchPlan& plan,
                Schedule& sched) {
  Opened o;
  RunFolder& folder = o.folder;
  RunSpan& span = o.span;
  RunProgress& prog = o.prog;
  folder.as_run = config_as_run(cfg, data, learner, plan, sched);
  prog.state.config = folder.as_run;
  prog.result.threads = cfg.threads;
  prog.result.precision = cfg.opt().precision;
  if (!cfg.opt().resume.empty()) {
    resume(rep, cfg, learner, plan, sched, folder, span, prog);
  } else if (rep.lead) {
    folder.dir = make_run_dir(cfg.opt().runs_dir, cfg.s.name);
    folder.lock = std::make_unique<RunLock>(folder.dir);  // a new folder: nobody else can hold it yet
  }
  span.last_epoch = cfg.opt().stop_after > 0 ? std::min(cfg.opt().stop_after, cfg.opt().epochs) : cfg.opt().epochs;
  KILN_CHECK(prog.state.epoch < span.last_epoch, "train.stop_after = ", cfg.opt().stop_after, ": ", folder.dir, " has trained ",
             prog.state.epoch, " epoch(s) already, so this invocation would train nothing; give a larger train.stop_after "
             "(at most train.epochs = ", cfg.opt().epochs, "), or none to train to the end");
  if (rep.lead) open_run_folder(rep, cfg, data, learner, plan, folder, prog);
  make_run_step(rep, cfg, learner, plan, prog, o.step);
  prog.result.run_dir = folder.dir;
  prog.result.batch = cfg.breq.global;
  prog.result.accumulate = plan.accumulate;
  prog.result.autobatch_target_bytes = plan.autobatch_target;
  CachingAllocator& device_alloc = allocator_for(rep.device);
  device_alloc.reset_peak();
  o.step.weights_bytes = device_alloc.stats().allocated;
  o.budget = start_budget(cfg, plan, prog);
  span.first_epoch = prog.state.epoch;
  prog.last_lr = sched.lr->lr_at(std::max<int64_t>(0, prog.state.step - 1));  // the checkpoint's last step's
  prog.last_save = Clock::now();
  return o;
}

void adopt_epochs(const Replica& rep, RunConfig& cfg, Schedule& sched, RunFolder& folder, RunSpan& span,
                  RunProgress& prog, int64_t n) {
  set_epochs(cfg, sched, folder, n);
  span.last_epoch = cfg.opt().stop_after > 0 ? std::min(cfg.opt().stop_after, cfg.opt().epochs) : cfg.opt().epochs;
  prog.state.config = folder.as_run;
  if (rep.lead) write_file_atomically(folder.dir + "/config.json", folder.as_run.dump(2) + "\n");  // the run as it runs
}

// --- finish -----------------------------------------------------------------------------------------

TrainResult interrupt_run(const Replica& rep, const RunConfig& cfg, const BatchPlan& plan, RunFolder& folder,
                          RunProgress& prog) {
  if (rep.lead && cfg.opt().plots && folder.log) folder.log->save_plots(folder.dir);
  if (rep.show)
    std::cout << "kiln: " << signal_name(prog.interrupted) << ": stopped at step " << prog.state.step << " (epoch "
              << prog.state.epoch + 1 << " of " << cfg.opt().epochs << ", batch " << prog.state.epoch_step << " of "
              << plan.steps_per_epoch << "); saved " << folder.dir << "/last\n"
              << "resume with: " << resume_command(folder.dir) << "\n";
  if (rep.lead)
    append_invocation(folder.dir, json{{"event", "end"}, {"outcome", std::string("stopped by ") + signal_name(prog.interrupted)},
                                      {"step", prog.state.step}, {"epoch", prog.state.epoch}, {"epoch_step", prog.state.epoch_step}});
  prog.result.interrupted = prog.interrupted;
  prog.result.epochs = cfg.opt().epochs;
  prog.result.steps = prog.state.step;
  rep.comm.barrier();
  return prog.result;
}

TrainResult finish_run(const EpochInputs& in) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  const RunData& data = in.data;
  Learner& learner = in.learner;
  BatchPlan& plan = in.plan;
  RunFolder& folder = in.folder;
  RunSpan& span = in.span;
  BudgetState& budget = in.budget;
  RunProgress& prog = in.prog;
  const TrainOptions& opt = cfg.opt();
  // train.tta: the last evaluation again with test-time augmentation; its numbers are the result and
  // the report's (metrics.csv and the best checkpoint keep the plain evaluations).
  if (opt.tta != "none" && !prog.final_confusion.empty()) {
    prog.final_confusion.assign(data.num_classes, std::vector<int64_t>(data.num_classes, 0));
    EvalCounts ec = run_eval(*learner.model, *plan.val_loader, rep.device, cfg.compute, span.last_epoch - 1, data.num_classes,
                             &prog.final_confusion, opt.tta);
    all_reduce_confusion(rep.comm, prog.final_confusion);
    publish_eval(rep, prog.result, ec, "tta=" + opt.tta);
    if (learner.ema) {  // and the EMA weights, whose figures are the result's ema_val_*
      EvalCounts ee = run_eval(*learner.ema->model, *plan.val_loader, rep.device, cfg.compute, span.last_epoch - 1, data.num_classes,
                               nullptr, opt.tta);
      publish(rep, ee, "ema", "tta=" + opt.tta, prog.result.ema_val_loss, prog.result.ema_val_top1, prog.result.ema_val_top5);
    }
  }
  if (rep.show && prog.state.best.epoch > 0)  // train.best_metric's choice (an earlier kiln's record has no epoch)
    std::cout << "best: epoch " << prog.state.best.epoch << ", " << metric_label(prog.state.best.metric) << " "
              << metric_text(prog.state.best.metric, prog.state.best.best) << " (train.best_metric) -> " << folder.dir << "/best\n";
  if (rep.lead && opt.plots && folder.log) {
    folder.log->save_plots(folder.dir);  // also after every epoch (end_epoch); here the run's last word
    if (rep.show) std::cout << "results in " << folder.dir << "\n";
  }
  if (rep.lead && !prog.final_confusion.empty())
    write_run_report(folder.dir, prog.final_confusion, report_class_names(*data.val_set), rep.show);
  prog.result.epochs = opt.epochs;
  if (rep.lead)
    append_invocation(folder.dir, json{{"event", "end"}, {"outcome", prog.result.stopped_early > 0          ? "stopped by train.early_stopping"
                                                    : span.last_epoch < opt.epochs ? "stopped by train.stop_after"
                                                                                : "finished"},
                                      {"step", prog.state.step}, {"epoch", prog.state.epoch}, {"val_top1", prog.result.val_top1},
                                      {"val_top5", prog.result.val_top5}, {"val_loss", prog.result.val_loss}, {"tta", opt.tta}});
  if (rep.show && budget.minutes > 0)
    std::cout << "time budget " << fmt("%.4g", budget.minutes) << " min: the run took "
              << fmt("%.1f", seconds_since(cfg.start) / 60) << " min (" << fmt("%.0f", seconds_since(cfg.start))
              << " s) for " << span.last_epoch - span.first_epoch << " of " << opt.epochs << " epochs\n";
  rep.comm.barrier();
  return prog.result;
}

}  // namespace trainer

// One replica: trains `config` on `device` as rank comm.rank() of comm.size() (the whole job when
// the size is 1). Every replica runs these same phases (tools/engine/replica_run.h); train() and
// train_replicas() start them.
TrainResult train_replica(const json& config, bool quiet, Communicator& comm, Device device) {
  using namespace trainer;
  const Replica rep = make_replica(comm, device, quiet);
  Prepared p = prepare_run(rep, config);  // the options, the model and optimizer, the datasets
  BatchPlan plan = plan_batch(rep, p.cfg, p.data, p.learner);
  Schedule sched = make_run_schedule(p.cfg, p.learner, plan);
  Opened o = open_run(rep, p.cfg, p.data, p.learner, plan, sched);  // the run folder, the step, the budget
  const EpochInputs in{rep, p.cfg, p.data, p.learner, plan, sched, o.step, o.folder, o.span, o.budget, o.prog};
  for (int64_t epoch = o.prog.state.epoch; epoch < o.span.last_epoch && !o.prog.interrupted; ++epoch) {
    const EpochOutcome e = run_epoch(in, epoch);
    if (!o.prog.interrupted) end_epoch(in, epoch, e);
  }
  return o.prog.interrupted ? interrupt_run(rep, p.cfg, plan, o.folder, o.prog) : finish_run(in);
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
