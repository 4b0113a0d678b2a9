// The training loop, top to bottom: set up (ranks, device, model, data, optimizer, schedule,
// resume), then epochs of train steps and evaluation, with metrics, checkpoints and plots.
#include "tools/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/comm.h"
#include "core/pinned.h"
#include "core/device.h"
#include "core/io/safetensors.h"
#include "core/step_stats.h"
#include "core/conv_policy.h"
#include "core/dnnl_context.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "core/ops/reduce.h"
#include "core/rng.h"
#include "data/config.h"
#include "layers/interop.h"
#include "models/registry.h"
#include "optim/grad_sync.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "tools/accumulate.h"
#include "tools/autobatch.h"
#include "tools/checkpoint.h"
#include "tools/class_weights.h"
#include "tools/evaluate.h"
#include "tools/finetune.h"
#include "tools/metrics.h"
#include "tools/model_check.h"
#include "tools/predict.h"
#include "tools/mpi_comm.h"
#include "tools/progress.h"
#include "tools/report.h"
#include "tools/train_ema.h"
#include "tools/time_budget.h"
#include "tools/train_step.h"
#include "tools/tta.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The sections of a config, validated; the top level accepts nothing else.
struct Sections {
  std::string name;
  json model, data, optim, schedule;
  TrainOptions train;
};

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
  r.finish();
  if (!s.train.checkpoint.empty()) s.model["checkpoint"] = s.train.checkpoint;
  return s;
}

// data.batch_size is the global batch; -1 (or a fraction in (0, 1)) asks AutoBatch.
struct BatchRequest {
  int64_t global = 64;
  double auto_fraction = 0;  // > 0: AutoBatch with this fraction
};

BatchRequest read_batch(json& data, double default_fraction) {
  BatchRequest b;
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

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

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

// The class names a report uses: none yet (reports number the classes).
// The names the reports label classes with: the source's (runs also save them as classes.json).
std::vector<std::string> report_class_names(const Dataset& d) { return d.class_names(); }

// Rank 0 at the end of training: the report files into the run folder, the table to stdout.
void write_run_report(const std::string& run_dir, const std::vector<std::vector<int64_t>>& confusion,
                      const std::vector<std::string>& names, bool show) {
  ClassificationReport rep = classification_report(confusion, names);
  write_report_files(rep, run_dir);
  if (show) std::cout << format_report(rep) << "report: " << run_dir << "/report.csv, confusion.png\n";
}


}  // namespace

// One replica: trains `config` on `device` as rank comm.rank() of comm.size() (the whole job when
// the size is 1). Every replica runs this same loop; train() and train_replicas() start them.
TrainResult train_replica(const json& config_in, bool quiet, Communicator& comm_ref, Device device) {
  const auto run_start = Clock::now();  // train.time_budget_minutes counts from here
  json config = config_in;
  Sections s = read_sections(config);
  BatchRequest breq = read_batch(config["data"], s.train.autobatch_fraction);
  // Mutable for train.time_budget_minutes, which lowers opt.epochs once it has measured the machine.
  TrainOptions& opt = s.train;

  // --- ranks and device -------------------------------------------------------------------------
  Communicator* comm = &comm_ref;
  comm->set_timeout(std::chrono::milliseconds(static_cast<int64_t>(opt.comm_timeout_s * 1000)));
  const int rank = comm->rank(), world = comm->size();
  if (opt.precision == "auto") {  // bf16 when every rank's device has the units; recorded as run
    std::vector<double> units{resolve_precision("auto", device) == "bf16" ? 1.0 : 0.0};
    comm->all_reduce_doubles(units);
    opt.precision = units[0] == world ? "bf16" : "fp32";
  }
  const DType compute = compute_dtype_of(opt.precision, device);
  const bool lead = rank == 0;
  const bool show = lead && !quiet;
  set_conv_benchmark(device, opt.cudnn_benchmark);  // cuDNN's on a GPU; the CPU has none

  // --- model, data ------------------------------------------------------------------------------
  manual_seed(static_cast<uint64_t>(opt.seed));
  std::shared_ptr<Module> model = models::build_model(s.model, "model");
  if (!opt.init.empty() && opt.resume.empty()) load_init_weights(*model, opt.init, opt.init_fresh, show);
  else if (!opt.init.empty() && show) std::cout << "init: not read: resuming, the checkpoint's weights are loaded\n";
  model->to(device);
  if (breq.auto_fraction > 0) config["data"]["batch_size"] = 1;  // validated below; chosen by AutoBatch
  else config["data"]["batch_size"] = breq.global;
  DataConfig dcfg = DataConfig::from_json(config["data"], "data");
  dcfg.loader.seed = static_cast<uint64_t>(opt.seed) ^ dcfg.loader.seed;
  if (opt.time_budget_minutes > 0) {  // tools/time_budget.h: what a budget can shorten
    const json sname = s.schedule.is_object() ? s.schedule.value("name", json("constant")) : json();
    KILN_CHECK(sname == "cosine" || sname == "constant", "train.time_budget_minutes = ", opt.time_budget_minutes,
               " needs a schedule whose length follows train.epochs (cosine, constant); schedule.name = ", sname.dump(),
               " has its steps at fixed epochs: set them for the epochs you want and drop the budget");
    KILN_CHECK(!dcfg.progressive_resize.enabled(), "train.time_budget_minutes = ", opt.time_budget_minutes,
               " cannot be used with data.progressive_resize, whose sizes change at fixed epochs");
  }
  // bf16 training: the loader writes bf16 batches (half the bytes to move); fp16 casts on the device.
  if (compute == DType::bf16) dcfg.loader.dtype = "bf16";
  auto train_set = make_dataset(dcfg, Split::train);
  auto val_set = make_dataset(dcfg, Split::val);
  // Before anything is allocated or written: the loaders' buffers fit, the model takes the images.
  check_before_run(*model, dcfg, train_set->image_shape(), breq.auto_fraction > 0 ? 1 : breq.global / world,
                   train_set->num_classes());
  const Tensor class_weights = loss_class_weights(opt, *train_set, device, show);
  // The shared training step (tools/train_step.h); accumulation, clipping, the scaler and the
  // all-reduce are added below, once known. AutoBatch's probe runs a copy without the update.
  StepSetup step_setup;
  step_setup.device = device;
  step_setup.compute = compute;
  step_setup.label_smoothing = opt.label_smoothing;
  step_setup.class_weights = class_weights;

  // --- optimizer --------------------------------------------------------------------------------
  std::vector<ParamRef> params = trainable_params(*model, opt.freeze, show);
  mark_no_decay_1d(params);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(s.optim, params, "optim");

  // Rank 0's buffers (BN running statistics) on every rank.
  auto broadcast_buffers = [&](Module& m) {
    for (auto& [n, t] : m.named_buffers()) comm->broadcast(t, 0);
  };
  // Rank 0's initial weights everywhere (also the buffers).
  if (world > 1) {
    for (auto& [n, t] : model->named_parameters()) comm->broadcast(t, 0);
    broadcast_buffers(*model);
  }

  // EMA of the weights (optim/ema.h, tools/train_ema.h): starts as a copy of the initial weights.
  std::unique_ptr<TrainingEma> ema = make_training_ema(opt.ema, s.model, *model, device);

  // --- AutoBatch --------------------------------------------------------------------------------
  // train.accumulate = "auto" (0): AutoBatch measures the largest micro-batch for the fixed batch.
  int64_t accumulate = opt.accumulate;
  KILN_CHECK(accumulate != 0 || breq.auto_fraction == 0, "config: train.accumulate = \"auto\" needs a fixed "
             "data.batch_size (the global batch to reach), not AutoBatch's; accepted: a data.batch_size > 0 with "
             "train.accumulate = \"auto\", or data.batch_size = -1 with train.accumulate = N (global batch = "
             "AutoBatch's micro-batch x ranks x N)");
  double autobatch_target = 0;
  if (breq.auto_fraction > 0 || accumulate == 0) {
    ImageShape shape = dcfg.transforms(Split::train).output_shape(train_set->image_shape());
    std::map<std::string, Tensor> saved;
    for (auto& [n, t] : model->named_buffers()) saved[n] = t.detach().clone();
    RngState rng = default_generator().state();
    CachingAllocator& alloc = allocator_for(device);
    // The optimizer's state is allocated at the first step: add it to the fit.
    const double state_bytes = optimizer->state_bytes();
    StepSetup probe_setup = step_setup;  // the training step's forward and backward, without the update
    probe_setup.read_loss = false;
    probe_setup.update = false;
    auto probe = [&](int64_t b) -> double {
      optimizer->zero_grad();
      alloc.reset_peak();
      size_t base = alloc.stats().allocated;
      try {
        Tensor x = rand_normal({b, shape.h, shape.w, shape.c}, 0, 1, DType::f32, device).to(compute);
        Tensor y = Tensor::zeros({b}, DType::i64, device);
        train_step(*model, *optimizer, StepBatch{x, y, Tensor()}, probe_setup);
      } catch (const OutOfMemoryError&) {  // also TooLargeError: auto_batch reads which one it was
        optimizer->zero_grad();
        throw;
      }
      double peak = static_cast<double>(alloc.stats().peak - base) + state_bytes;
      optimizer->zero_grad();
      return peak;
    };
    double free_bytes = device.is_cpu() ? cpu_available_bytes() : static_cast<double>(memory_info(device).first);
    // The probes measure this rank's batch on this rank's device. A GPU is the rank's own; CPU ranks
    // of one machine share its RAM, so each plans with its share of what is free.
    const int sharing = device.is_cpu() ? (launched_by_mpirun() ? local_size() : world) : 1;
    free_bytes /= sharing;
    AutoBatchOptions ao;
    ao.fraction = breq.auto_fraction;
    ao.max_batch = std::min<int64_t>(device.is_cpu() ? 1024 : 8192, train_set->size() / world);
    // Probe with cuDNN's heuristics: benchmark mode would time every algorithm of every probe batch
    // (conv plans are per batch size); training then benchmarks its own batch once.
    struct BenchmarkOff {
      Device d;
      bool was;
      explicit BenchmarkOff(Device dev) : d(dev), was(conv_benchmark(dev)) { if (was) set_conv_benchmark(d, false); }
      ~BenchmarkOff() { if (was) set_conv_benchmark(d, true); }
    } benchmark_off(device);
    if (accumulate == 0) {
      KILN_CHECK(breq.global % world == 0, "data.batch_size = ", breq.global, " is the global batch and must divide by the ",
                 world, " ranks");
      AccumulationPlan plan = plan_accumulation(probe, free_bytes, opt.autobatch_fraction, breq.global / world);
      // The same N on every rank: the one for the smallest micro-batch that fits.
      accumulate = smallest_accumulation(breq.global / world, comm->all_reduce_min(plan.autobatch.batch));
      autobatch_target = plan.autobatch.target_bytes;
      if (show)
        std::cout << plan.report << (accumulate != plan.n ? " (another rank fits less: " + std::to_string(accumulate) +
                                                                " micro-batches on every rank)" : "") << "\n";
    } else {
      AutoBatchResult ab = auto_batch(probe, free_bytes, ao);
      int64_t per_rank = comm->all_reduce_min(ab.batch);  // the same batch on every rank: the smallest
      breq.global = per_rank * world * accumulate;  // with train.accumulate = N: N micro-batches per rank
      autobatch_target = ab.target_bytes;
      if (show)
        std::cout << ab.report()
                  << (world > 1 ? " per rank" + std::string(sharing > 1 ? " (1/" + std::to_string(sharing) + " of the machine's free memory each)" : "") +
                                  "; global batch " + std::to_string(breq.global) + " over " + std::to_string(world) + " ranks"
                                : "")
                  << "\n";
    }
    for (auto& [n, t] : model->named_buffers()) copy_tensor(t, saved[n]);
    default_generator().set_state(rng);
  }
  KILN_CHECK(breq.global % world == 0, "data.batch_size = ", breq.global, " is the global batch and must divide by the ",
             world, " ranks");
  check_accumulation(breq.global, world, accumulate);
  dcfg.loader.batch_size = breq.global / world;
  Shard shard{rank, world};
  DataLoader train_loader(train_set, dcfg.train_transforms, dcfg.loader_options(Split::train), shard);
  train_loader.set_progressive_resize(dcfg.progressive_resize);
  LoaderOptions vopt = dcfg.loader_options(Split::val);
  if (dcfg.val_batch_size == 0) vopt.batch_size = dcfg.loader.batch_size;
  DataLoader val_loader(val_set, dcfg.val_transforms, vopt, shard);
  int64_t steps_per_epoch = train_loader.batches_per_epoch();
  if (opt.max_steps_per_epoch > 0) steps_per_epoch = std::min(steps_per_epoch, opt.max_steps_per_epoch);
  KILN_CHECK(steps_per_epoch > 0, "data: the training split has ", train_set->size(), " samples, fewer than one batch of ",
             dcfg.loader.batch_size, " per rank");
  ScheduleContext sctx{optimizer->lr(), steps_per_epoch, opt.epochs};
  std::unique_ptr<LrSchedule> schedule = make_schedule(s.schedule, sctx, "schedule");
  // Changes the run's epochs (train.time_budget_minutes' decision, or on resume the checkpoint's):
  // the schedule follows, and so does the config as run.
  json as_run;
  auto set_epochs = [&](int64_t n) {
    opt.epochs = n;
    opt.time_budget_minutes = 0;  // decided: the config as run is the run with these epochs
    sctx.epochs = n;
    schedule = make_schedule(s.schedule, sctx, "schedule");
    as_run["train"]["epochs"] = n;
    as_run["train"]["time_budget_minutes"] = 0;
  };

  // --- run folder, resume -----------------------------------------------------------------------
  TrainingState state;
  as_run = config;
  as_run["train"] = opt.to_json();
  as_run["data"] = dcfg.to_json();
  as_run["data"]["batch_size"] = breq.global;
  as_run["train"]["accumulate"] = accumulate;  // "auto"'s choice
  as_run["model"] = model->to_json();
  as_run["optim"] = optimizer->to_json();
  as_run["schedule"] = schedule->to_json();
  state.config = as_run;
  std::string run_dir;
  bool budget_decided_on_resume = false;
  if (!opt.resume.empty()) {
    std::string base = resolve_checkpoint(opt.resume);
    state = load_checkpoint(base, *model, ema ? ema->model.get() : nullptr);
    if (ema && !state.ema_loaded) {  // EMA switched on for a run that had none: it starts here
      ema->ema->reset_to_live();
      if (show) std::cout << "ema: the checkpoint has no EMA weights; the average starts from its weights\n";
    }
    optimizer->load_state_dict(state.optimizer);
    default_generator().set_state(state.rng);
    run_dir = fs::path(base).parent_path().string();
    budget_decided_on_resume = opt.time_budget_minutes > 0;
    if (budget_decided_on_resume) {
      // The budget was decided in the run's first epoch; a resumed run keeps the epochs its
      // checkpoint was trained for (its schedule), whatever time is left.
      const json t = state.config.value("train", json::object());
      const json e = t.is_object() ? t.value("epochs", json()) : json();
      KILN_CHECK(e.is_number_integer() && e.get<int64_t>() >= 1, "resume: ", base,
                 " does not record its train.epochs, which train.time_budget_minutes needs to continue its schedule");
      set_epochs(e.get<int64_t>());
      if (show)
        std::cout << "time budget: resumed runs keep the checkpoint's " << opt.epochs << " epochs (decided at its start)\n";
    }
    state.config = as_run;
    if (show) std::cout << "resumed " << base << " at epoch " << state.epoch << ", step " << state.step << "\n";
    KILN_CHECK(state.epoch < opt.epochs, "resume: the checkpoint has finished ", state.epoch, " epochs and train.epochs is ",
               opt.epochs,
               budget_decided_on_resume ? " (decided by train.time_budget_minutes at the run's start; drop the budget and "
                                          "ask for more epochs, epochs=N, to continue)"
                                        : "; ask for more epochs (epochs=N) to continue");
  } else if (lead) {
    run_dir = make_run_dir(opt.runs_dir, s.name);
  }
  std::unique_ptr<MetricsLog> log;
  if (lead) {
    std::ofstream(run_dir + "/config.json") << as_run.dump(2) << "\n";
    save_class_names(run_dir + "/classes.json", train_set->class_names());  // kiln predict's (tools/predict.h)
    log = std::make_unique<MetricsLog>(run_dir);
    if (show) {
      std::cout << "kiln: " << s.name << " on " << device.str() << (world > 1 ? " x" + std::to_string(world) + " ranks" : "")
                << ", " << model->num_parameters() << " parameters, batch " << breq.global << ", "
                << steps_per_epoch << " steps/epoch"
                << (accumulate > 1 ? " of " + std::to_string(accumulate) + " micro-batches" : std::string())
                << (ema ? ", EMA " + ema->ema->options().to_json().dump() : std::string()) << " -> " << run_dir << "\n";
      if (device.is_cpu() && compute != DType::f32 && !onednn::native_compute(compute))
        std::cout << "kiln: note: this CPU has no native " << dtype_name(compute)
                  << " convolutions (no AVX-512 BF16 or AMX): they run in f32 with conversions, usually slower than "
                  << "train.precision=fp32 (docs/precision.md)\n";
    }
  }

  // fp16: dynamic loss scaling; its state continues from the checkpoint on resume.
  std::unique_ptr<LossScaler> scaler;
  if (compute == DType::f16) {
    scaler = std::make_unique<LossScaler>(opt.loss_scaler);
    if (!state.scaler.empty()) scaler->load_state_dict(state.scaler);
  }

  std::unique_ptr<GradSync> sync;
  if (world > 1) {
    std::vector<Tensor> ps;
    for (auto& p : params) ps.push_back(p.param);
    sync = std::make_unique<GradSync>(ps, *comm);
  }
  step_setup.accumulate = accumulate;
  step_setup.clip_grad_norm = opt.clip_grad_norm;
  step_setup.scaler = scaler.get();
  step_setup.sync = sync.get();
  step_setup.read_loss = device.is_cpu();  // free on the host; elsewhere the statistics stay on the device
  // fp16 on a GPU: the skip decision stays on the device too, where it can (an optimizer that skips
  // there, no clipping, no EMA: the EMA updates only after a step taken), so that no step waits for it.
  step_setup.scaler_on_device = scaler && !device.is_cpu() && optimizer->can_skip_on_device() &&
                                opt.clip_grad_norm <= 0 && !ema;

  // --- epochs -----------------------------------------------------------------------------------
  TrainResult result;
  result.run_dir = run_dir;
  result.batch = breq.global;
  result.accumulate = accumulate;
  result.autobatch_target_bytes = autobatch_target;
  CachingAllocator& device_alloc = allocator_for(device);
  device_alloc.reset_peak();
  const size_t weights_bytes = device_alloc.stats().allocated;
  const bool tty = Progress::stdout_is_tty();
  int64_t num_classes = train_set->num_classes();
  int64_t last_epoch = opt.stop_after > 0 ? std::min(opt.stop_after, opt.epochs) : opt.epochs;
  std::vector<std::vector<int64_t>> final_confusion;  // from the last evaluation (empty without one)
  // An evaluation's counts summed over ranks into (loss, top1, top5), and its line
  // ("<label>   <what>  loss ..."): label "val" for the live weights, "ema" for train.ema's.
  auto publish = [&](const EvalCounts& ec, const char* label, const std::string& what, double& loss, double& top1,
                     double& top5) {
    std::vector<double> v{ec.loss_sum, ec.top1, ec.top5, ec.samples};
    comm->all_reduce_doubles(v);
    loss = v[0] / v[3];
    top1 = v[1] / v[3];
    top5 = v[2] / v[3];
    if (show)
      std::cout << label << "   " << what << "  loss " << fmt("%.4f", loss) << "  top1 " << fmt("%.2f%%", 100 * top1)
                << "  top5 " << fmt("%.2f%%", 100 * top5) << "  (" << static_cast<int64_t>(v[3]) << " images)\n";
  };
  auto publish_eval = [&](const EvalCounts& ec, const std::string& what) {
    publish(ec, "val", what, result.val_loss, result.val_top1, result.val_top5);
  };
  // train.time_budget_minutes (tools/time_budget.h): steps mark_at + 1 .. decide_at are timed (from
  // the loop's start when mark_at is 0), and after step decide_at (in the first epoch) the epochs
  // are lowered to what fits.
  const double budget_minutes = opt.time_budget_minutes;
  const bool budget_pending = budget_minutes > 0 && state.step == 0;  // a resumed run has decided
  const int64_t decide_at = budget_pending ? budget_decision_step(steps_per_epoch) : 0;
  const int64_t mark_at = std::min(kUntimedSteps, std::max<int64_t>(0, decide_at - 1));
  Clock::time_point mark_time = Clock::now();
  BudgetInput budget_in;           // the decision's inputs, which the rechecks start from
  int64_t budget_epoch = -1;       // the epoch the decision was taken in (-1: none in this invocation)
  int64_t budget_step = 0;         // and its step
  double last_eval_s = -1;         // the last evaluation's measured seconds (live and EMA weights)
  std::vector<double> epoch_step_s;  // seconds per step of each epoch after the decision's
  auto adopt_epochs = [&](int64_t n) {  // the budget's epochs: the schedule and the run folder follow
    set_epochs(n);
    last_epoch = opt.stop_after > 0 ? std::min(opt.stop_after, opt.epochs) : opt.epochs;
    state.config = as_run;
    if (lead) write_file_atomically(run_dir + "/config.json", as_run.dump(2) + "\n");  // the run as it runs
  };
  auto decide_budget = [&](const Batch& batch) {
    synchronize(device);
    BudgetInput in;
    in.budget_s = budget_minutes * 60;
    in.elapsed_s = seconds_since(run_start);
    in.steps_done = state.step;
    in.steps_per_epoch = steps_per_epoch;
    in.max_epochs = opt.epochs;
    in.eval_every = opt.eval_every;
    in.step_s = seconds_since(mark_time) / static_cast<double>(decide_at - mark_at);
    {  // one evaluation: the forward in evaluation mode on a validation batch's shape (zeros; the
       // training batch when the validation images have no fixed size), the faster of two
      NoGradGuard ng;
      model->eval();
      const ImageShape vs = dcfg.transforms(Split::val).output_shape(val_set->image_shape());
      Tensor x = vs.known() ? Tensor::zeros({vopt.batch_size, vs.h, vs.w, vs.c}, DType::f32, device).to(compute)
                            : batch.images.to(device).to(compute);
      double best = 0;
      for (int k = 0; k < 2; ++k) {
        const auto t = Clock::now();
        Tensor y = model->forward(x);
        synchronize(device);
        best = k == 0 ? seconds_since(t) : std::min(best, seconds_since(t));
      }
      model->train();
      const double val_images = static_cast<double>(val_loader.batches_per_epoch() * vopt.batch_size);
      in.eval_s = best / static_cast<double>(x.size(0)) * val_images * (ema ? 2 : 1);
    }
    in.final_extra_s = opt.tta != "none" ? 2 * in.eval_s : 0;  // flip: two views of every image
    const BudgetPlan plan = plan_budget(in);
    budget_in = in;
    budget_epoch = state.epoch;
    budget_step = state.step;
    std::vector<double> chosen{lead ? static_cast<double>(plan.epochs) : 0.0};  // rank 0's decision, on every rank
    comm->all_reduce_doubles(chosen);
    adopt_epochs(static_cast<int64_t>(chosen[0]));
    if (show) std::cout << (tty ? "\n" : "") << describe_budget(in, plan) << "\n";
  };
  const int64_t first_epoch = state.epoch;
  PinnedStaging mix_staging;  // MixUp/CutMix's batch in pinned memory on a GPU: its upload does not wait
  for (int64_t epoch = state.epoch; epoch < last_epoch; ++epoch) {
    model->train();
    train_loader.start_epoch(epoch);
    train_loader.reset_stats();
    if (show && dcfg.progressive_resize.enabled() &&
        (epoch == first_epoch || train_loader.epoch_image_shape(epoch) != train_loader.epoch_image_shape(epoch - 1))) {
      const ImageShape sh = train_loader.epoch_image_shape(epoch);
      std::cout << "progressive_resize: epoch " << epoch + 1 << " trains at " << sh.h << "x" << sh.w << "\n";
    }
    Progress bar("train", static_cast<int>(epoch + 1), static_cast<int>(opt.epochs), steps_per_epoch, tty, opt.log_every);
    double loss_sum = 0, correct = 0, seen = 0;
    // A step does not wait for the device: each micro-batch's loss and correct count are
    // accumulated on the device (`stats`, core/step_stats.h's accumulate_step_stats) and read every
    // `read_every` steps (the log interval) and at the end of the epoch, where a non-finite loss
    // (fp32/bf16) is reported with the step it happened at. Where the step reads its loss anyway
    // (step_setup.read_loss: the CPU, where reading is free) they are read every step.
    const int64_t read_every = step_setup.read_loss ? 1
                               : opt.log_every > 0  ? opt.log_every
                                                    : std::max<int64_t>(1, steps_per_epoch / 10);
    const auto accumulate_step_stats = accumulate_step_stats_kernel.get(device, "accumulate_step_stats");
    Tensor stats = Tensor::zeros({5}, DType::f64, device);
    auto read_stats = [&] {  // fold the device's accumulators into the host's sums
      std::vector<double> v = stats.to(Device::cpu()).to_double_vector();
      stats.zero_();
      loss_sum += v[0];
      correct += v[1];
      if (scaler) scaler->poll();  // device mode: the skips so far; stops after max_nonfinite_steps in a row
      KILN_CHECK(v[2] == 0 || scaler, "the loss became ", v[4], " at epoch ", epoch + 1, ", step ",
                 static_cast<int64_t>(v[3]) + 1, " (the loss is read from ", device.str(), " every ",
                 read_every, " steps); try a lower learning rate (optim.lr) or gradient clipping (train.clip_grad_norm)");
    };
    auto t0 = Clock::now();
    auto progress_fields = [&](double lr) {
      double el = seconds_since(t0);
      std::string f = "loss " + fmt("%.4f", loss_sum / seen) + "  acc " + fmt("%.1f%%", 100 * correct / seen) + "  lr " +
                      fmt("%.4g", lr) + "  " + fmt("%.0f", seen * world / el) + " img/s  data " +
                      fmt("%.0f%%", 100 * train_loader.stats().wait_seconds / std::max(el, 1e-9));
      if (scaler) f += "  scale " + fmt("%g", scaler->scale()) + "  skipped " + std::to_string(scaler->skipped_steps());
      return f;
    };
    Batch b;
    int64_t i = 0;
    std::string fields;
    for (; i < steps_per_epoch && ((i > 0 && opt.reuse_first_batch) || train_loader.next(b)); ++i) {
      double lr = schedule->lr_at(state.step);
      optimizer->set_lr(lr);
      // train.mixup: the mixed images, soft targets and the labels accuracy counts (data/mix.h), drawn
      // for the whole batch, so that train.accumulate does not change what is mixed.
      MixedBatch mixed = mix_batch(opt.mixup, static_cast<uint64_t>(opt.seed), b, num_classes, opt.label_smoothing,
                                   device.is_cuda() ? &mix_staging : nullptr);
      // The shared step (tools/train_step.h): micro-batches (train.accumulate), scaled backward,
      // all-reduce, unscale and check, clip, optimizer step. Each micro-batch's loss and correct
      // count go to the epoch's statistics, accumulated on the device.
      StepResult r = train_step(*model, *optimizer, StepBatch{mixed.images, mixed.labels, mixed.targets}, step_setup,
                                [&](const MicroBatchOut& mo) {
                                  accumulate_step_stats(stats, mo.loss.detach(), mo.logits32.detach(), mo.labels,
                                                        static_cast<double>(mo.size), i);
                                });
      double l = r.loss;
      KILN_CHECK(r.finite || scaler, "the loss became ", l, " at epoch ", epoch + 1, ", step ", i + 1,
                 "; try a lower learning rate (optim.lr) or gradient clipping (train.clip_grad_norm)");
      if (r.stepped && ema) ema->ema->update(state.step);
      ++state.step;
      if (budget_pending && state.step == mark_at && mark_at > 0) {
        synchronize(device);
        mark_time = Clock::now();
      }
      if (budget_pending && state.step == decide_at) decide_budget(b);
      seen += b.size();
      // A skipped fp16 step's non-finite loss is counted by the scaler, not in the mean loss.
      if ((i + 1) % read_every != 0) continue;  // nothing new to show
      read_stats();
      if (show) {
        fields = progress_fields(lr);
        bar.update(i + 1, fields);
      }
    }
    if (i % read_every != 0) {  // the steps since the last read
      read_stats();
      if (show && seen > 0) fields = progress_fields(optimizer->lr());
    }
    double train_time = seconds_since(t0);
    std::vector<double> tr{loss_sum, correct, seen, train_loader.stats().wait_seconds};
    comm->all_reduce_doubles(tr);
    result.train_loss = tr[0] / tr[2];
    result.train_acc = tr[1] / tr[2];
    result.images_per_s = tr[2] / train_time;
    result.data_wait_share = tr[3] / world / train_time;
    result.steps = state.step;
    result.peak_bytes = static_cast<double>(device_alloc.stats().peak - weights_bytes);
    if (scaler) {
      result.skipped_steps = scaler->skipped_steps();
      result.loss_scale = scaler->scale();
    }
    if (show) bar.finish(fields);
    if (show) std::cout << ops::conv_algo::report_once();  // the first epoch's convolution timing cost
    // data.skip_bad_samples: each loader (train and val) reports what it skipped (data/loader.h).

    // Batch-norm running statistics are per replica (each updates them from its own shard). Every
    // replica takes rank 0's before evaluating, so that the evaluation, summed over the replicas'
    // shards, is that of the model the checkpoint saves (rank 0's); the EMA's copies likewise.
    // (PyTorch's DDP broadcasts them before every forward.) All ranks call it at the same point.
    if (world > 1) {
      broadcast_buffers(*model);
      if (ema) broadcast_buffers(*ema->model);
    }

    bool do_eval = (epoch + 1) % opt.eval_every == 0 || epoch + 1 == opt.epochs;
    const auto eval_start = Clock::now();
    if (do_eval) {
      // The last evaluation of this invocation also counts the confusion matrix, for the report.
      const bool final_eval = epoch + 1 == last_epoch;
      if (final_eval) final_confusion.assign(num_classes, std::vector<int64_t>(num_classes, 0));
      EvalCounts ec = run_eval(*model, val_loader, device, compute, epoch, num_classes,
                               final_eval ? &final_confusion : nullptr, "none");
      if (final_eval) all_reduce_confusion(*comm, final_confusion);
      publish_eval(ec, std::to_string(epoch + 1) + "/" + std::to_string(opt.epochs));
      if (ema) {  // the EMA weights on the same images (tools/train_ema.h)
        EvalCounts ee = run_eval(*ema->model, val_loader, device, compute, epoch, num_classes, nullptr, "none");
        publish(ee, "ema", std::to_string(epoch + 1) + "/" + std::to_string(opt.epochs), result.ema_val_loss,
                result.ema_val_top1, result.ema_val_top5);
      }
      last_eval_s = seconds_since(eval_start);
    }
    // train.time_budget_minutes, kept (tools/time_budget.h): after every epoch past the decision's,
    // the run is predicted again at the last epochs' speed: its epochs lowered if it would overrun,
    // raised (first half only) if more fit.
    if (budget_epoch >= 0 && epoch > budget_epoch && epoch + 1 < opt.epochs) {
      BudgetInput in = budget_in;
      const double slow = budget_test_slowdown();
      in.elapsed_s = seconds_since(run_start) + slow * static_cast<double>(state.step - budget_step);
      in.steps_done = state.step;
      in.epochs_done = epoch + 1;
      in.max_epochs = opt.epochs;
      in.cap_epochs = budget_in.max_epochs;  // train.epochs, as the decision had it
      epoch_step_s.push_back(train_time / static_cast<double>(std::max<int64_t>(i, 1)) + slow);
      in.step_s = budget_recent_step_s(epoch_step_s);
      if (last_eval_s >= 0) in.eval_s = last_eval_s;
      in.final_extra_s = opt.tta != "none" ? 2 * in.eval_s : 0;
      std::vector<double> keep{lead ? static_cast<double>(recheck_budget(in)) : 0.0};  // rank 0's, on every rank
      comm->all_reduce_doubles(keep);
      const int64_t n = static_cast<int64_t>(keep[0]);
      if (n != opt.epochs) {
        if (show) std::cout << describe_recheck(in, n) << "\n";
        adopt_epochs(n);
      }
    }
    state.epoch = epoch + 1;
    state.rng = default_generator().state();
    if (scaler) state.scaler = scaler->state_dict();
    if (lead) {
      std::vector<std::pair<std::string, double>> row{{"epoch", static_cast<double>(epoch + 1)},
                  {"step", static_cast<double>(state.step)},
                  {"lr", optimizer->lr()},
                  {"train_loss", result.train_loss},
                  {"train_acc", result.train_acc},
                  {"val_loss", do_eval ? result.val_loss : NAN},
                  {"val_top1", do_eval ? result.val_top1 : NAN},
                  {"val_top5", do_eval ? result.val_top5 : NAN},
                  {"images_per_s", result.images_per_s},
                  {"data_wait_share", result.data_wait_share},
                  {"epoch_seconds", train_time},
                  {"skipped_steps", static_cast<double>(result.skipped_steps)},
                  {"loss_scale", result.loss_scale}};
      if (ema)
        for (auto [k, x] : {std::pair{"ema_val_loss", result.ema_val_loss}, {"ema_val_top1", result.ema_val_top1},
                            {"ema_val_top5", result.ema_val_top5}})
          row.emplace_back(k, do_eval ? x : NAN);
      log->write(row);
      state.optimizer = optimizer->state_dict();
      // `best`: by the live weights' top-1, or with train.ema.best_by = "ema" by the EMA's.
      const double top1 = ema && opt.ema.best_by == "ema" ? result.ema_val_top1 : result.val_top1;
      bool best = do_eval && top1 > state.best_top1;
      if (best) state.best_top1 = top1;
      Module* ema_model = ema ? ema->model.get() : nullptr;
      save_checkpoint(run_dir + "/last", *model, state, ema_model);
      if (best) save_checkpoint(run_dir + "/best", *model, state, ema_model);
    }
  }

  // train.tta: the last evaluation again with test-time augmentation; its numbers are the result and
  // the report's (metrics.csv and the best checkpoint keep the plain evaluations).
  if (opt.tta != "none" && !final_confusion.empty()) {
    final_confusion.assign(num_classes, std::vector<int64_t>(num_classes, 0));
    EvalCounts ec = run_eval(*model, val_loader, device, compute, last_epoch - 1, num_classes, &final_confusion, opt.tta);
    all_reduce_confusion(*comm, final_confusion);
    publish_eval(ec, "tta=" + opt.tta);
    if (ema) {  // and the EMA weights, whose figures are the result's ema_val_*
      EvalCounts ee = run_eval(*ema->model, val_loader, device, compute, last_epoch - 1, num_classes, nullptr, opt.tta);
      publish(ee, "ema", "tta=" + opt.tta, result.ema_val_loss, result.ema_val_top1, result.ema_val_top5);
    }
  }

  if (lead && opt.plots && log) {
    log->save_plots(run_dir);
    if (show) std::cout << "results in " << run_dir << "\n";
  }
  if (lead && !final_confusion.empty()) write_run_report(run_dir, final_confusion, report_class_names(*val_set), show);
  result.epochs = opt.epochs;
  if (show && budget_minutes > 0)
    std::cout << "time budget " << fmt("%.4g", budget_minutes) << " min: the run took "
              << fmt("%.1f", seconds_since(run_start) / 60) << " min (" << fmt("%.0f", seconds_since(run_start))
              << " s) for " << last_epoch - first_epoch << " of "
              << opt.epochs << " epochs\n";
  comm->barrier();
  return result;
}

EvalResult evaluate(const json& config_in, const std::string& weights) {
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
