// An epoch of the training loop (tools/engine/replica_run.h): run_epoch's step loop with its progress
// lines and statistics, end_epoch's evaluations, time-budget recheck, train.best_metric's and
// train.early_stopping's records, metrics row and checkpoints, and train.time_budget_minutes'
// decision taken inside the first epoch.
// Tests: tests/engine/trainer_test.cpp, tests/engine/time_budget_test.cpp, tests/engine/accumulate_test.cpp,
// tests/engine/metric_watch_test.cpp.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <map>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/conv_policy.h"
#include "core/host_wait.h"
#include "core/step_stats.h"
#include "core/rng.h"
#include "data/mix.h"
#include "tools/engine/batch_images.h"
#include "tools/engine/metric_watch.h"
#include "tools/engine/interrupt.h"
#include "tools/engine/progress.h"
#include "tools/engine/replica_run.h"

namespace kiln::trainer {

namespace {

// --- the time budget's decision (tools/engine/time_budget.h) ---------------------------------------

// One evaluation's predicted seconds: the forward in evaluation mode on a validation batch's shape
// (zeros; the training batch when the validation images have no fixed size), the faster of two,
// scaled to the validation split (twice with the EMA's weights).
double predict_eval_seconds(const Replica& rep, const RunConfig& cfg, const RunData& data, Learner& learner,
                            const BatchPlan& plan, const Batch& batch) {
  NoGradGuard ng;
  learner.model->eval();
  const ImageShape vs = data.dcfg.transforms(Split::val).output_shape(data.val_set->image_shape());
  Tensor x = vs.known() ? Tensor::zeros({plan.vopt.batch_size, vs.h, vs.w, vs.c}, DType::f32, rep.device).to(cfg.compute)
                        : device_images(batch, rep.device, cfg.compute);
  double best = 0;
  for (int k = 0; k < 2; ++k) {
    const auto t = Clock::now();
    Tensor y = learner.model->forward(x);
    synchronize(rep.device);
    best = k == 0 ? seconds_since(t) : std::min(best, seconds_since(t));
  }
  learner.model->train();
  const double val_images = static_cast<double>(plan.val_loader->batches_per_epoch() * plan.vopt.batch_size);
  return best / static_cast<double>(x.size(0)) * val_images * (learner.ema ? 2 : 1);
}

// After step decide_at: the epochs that fit the budget at this machine's measured speed, rank 0's
// on every rank.
void decide_budget(const EpochInputs& in, const Batch& batch) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  const RunData& data = in.data;
  Learner& learner = in.learner;
  BatchPlan& plan = in.plan;
  Schedule& sched = in.sched;
  RunFolder& folder = in.folder;
  RunSpan& span = in.span;
  RunProgress& prog = in.prog;
  BudgetState& b = in.budget;
  synchronize(rep.device);
  BudgetInput bin;
  bin.budget_s = b.minutes * 60;
  bin.elapsed_s = run_seconds(cfg, span);
  bin.steps_done = prog.state.step;
  bin.steps_per_epoch = plan.steps_per_epoch;
  bin.max_epochs = cfg.opt().epochs;
  bin.eval_every = cfg.opt().eval_every;
  bin.step_s = seconds_since(b.mark_time) / static_cast<double>(b.decide_at - b.mark_at);
  bin.eval_s = predict_eval_seconds(rep, cfg, data, learner, plan, batch);
  bin.final_extra_s = cfg.opt().tta != "none" ? 2 * bin.eval_s : 0;  // flip: two views of every image
  const BudgetPlan bplan = plan_budget(bin);
  b.in = bin;
  b.epoch = prog.state.epoch;
  b.step = prog.state.step;
  std::vector<double> chosen{rep.lead ? static_cast<double>(bplan.epochs) : 0.0};  // rank 0's decision, on every rank
  rep.comm.all_reduce_doubles(chosen);
  adopt_epochs(rep, cfg, sched, folder, span, prog, static_cast<int64_t>(chosen[0]));
  if (rep.show) std::cout << (rep.tty ? "\n" : "") << describe_budget(bin, bplan) << "\n";
}

// After a step: the budget's timing mark, then its decision.
void after_step_budget(const EpochInputs& in, const Batch& batch) {
  const Replica& rep = in.rep;
  RunProgress& prog = in.prog;
  BudgetState& b = in.budget;
  if (b.pending && prog.state.step == b.mark_at && b.mark_at > 0) {
    synchronize(rep.device);
    b.mark_time = Clock::now();
  }
  if (b.pending && prog.state.step == b.decide_at) decide_budget(in, batch);
}

// Kept (tools/engine/time_budget.h): after every epoch past the decision's, the run is predicted
// again at the last epochs' speed: its epochs lowered if it would overrun, raised (first half only)
// if more fit.
void recheck_budget_after(const EpochInputs& in, int64_t epoch, const EpochOutcome& e) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  Schedule& sched = in.sched;
  RunFolder& folder = in.folder;
  RunSpan& span = in.span;
  RunProgress& prog = in.prog;
  BudgetState& b = in.budget;
  if (!(b.epoch >= 0 && epoch > b.epoch && epoch + 1 < cfg.opt().epochs)) return;
  BudgetInput bin = b.in;
  const double slow = budget_test_slowdown();
  bin.elapsed_s = run_seconds(cfg, span) + slow * static_cast<double>(prog.state.step - b.step);
  bin.steps_done = prog.state.step;
  bin.epochs_done = epoch + 1;
  bin.max_epochs = cfg.opt().epochs;
  bin.cap_epochs = b.in.max_epochs;  // train.epochs, as the decision had it
  b.epoch_step_s.push_back(e.train_seconds / static_cast<double>(std::max<int64_t>(e.steps, 1)) + slow);
  bin.step_s = budget_recent_step_s(b.epoch_step_s, b.in.step_s);
  if (b.last_eval_s >= 0) bin.eval_s = b.last_eval_s;
  bin.final_extra_s = cfg.opt().tta != "none" ? 2 * bin.eval_s : 0;
  std::vector<double> keep{rep.lead ? static_cast<double>(recheck_budget(bin)) : 0.0};  // rank 0's, on every rank
  rep.comm.all_reduce_doubles(keep);
  const int64_t n = static_cast<int64_t>(keep[0]);
  if (n != cfg.opt().epochs) {
    if (rep.show) std::cout << describe_recheck(bin, n) << "\n";
    adopt_epochs(rep, cfg, sched, folder, span, prog, n);
  }
}

// --- an epoch's training statistics ----------------------------------------------------------------

// A step does not wait for the device: each micro-batch's loss and correct count are accumulated on
// the device (`acc`, core/step_stats.h's accumulate_step_stats) and read every `read_every` steps
// (the log interval) and at the end of the epoch, where a non-finite loss (fp32/bf16) is reported
// with the step it happened at. Where the step reads its loss anyway (StepSetup::read_loss: the CPU,
// where reading is free) they are read every step.
struct EpochStats {
  double loss_sum = 0, correct = 0, seen = 0;
  double wait_before = 0, seconds_before = 0;  // a resumed epoch's data wait and training seconds so far
  int64_t read_every = 1;
  double blocked_start = host_wait_stats().seconds;  // the host's time blocked on devices before the epoch
  Tensor acc;  // (5) f64 on the device: loss sum, correct, non-finite flag, its step, its loss

  EpochStats(const StepSetup& setup, const TrainOptions& opt, int64_t steps_per_epoch)
      : read_every(setup.read_loss     ? 1
                   : opt.log_every > 0 ? opt.log_every
                                       : std::max<int64_t>(1, steps_per_epoch / 10)) {}

  // Folds the device's accumulators (on `device`) into the host's sums.
  void read(const StepSetup& setup, Device device, int64_t epoch) {
    std::vector<double> v = acc.to(Device::cpu()).to_double_vector();
    acc.zero_();
    loss_sum += v[0];
    correct += v[1];
    LossScaler* scaler = setup.scaler.get();
    if (scaler) scaler->poll();  // device mode: the skips so far; stops after max_nonfinite_steps in a row
    KILN_CHECK(v[2] == 0 || scaler, "the loss became ", v[4], " at epoch ", epoch + 1, ", step ",
               static_cast<int64_t>(v[3]) + 1, " (the loss is read from ", device.str(), " every ", read_every,
               " steps); try a lower learning rate (optim.lr) or gradient clipping (train.clip_grad_norm)");
  }
};

// The epoch's figures so far, summed over the ranks (every rank calls it at the same step): what a
// save keeps (TrainingState::progress) so the resumed epoch's row covers it all.
std::map<std::string, double> epoch_totals(const Replica& rep, const BatchPlan& plan, const EpochStats& st,
                                           double seconds) {
  std::vector<double> v{st.loss_sum, st.correct, st.seen, st.wait_before + plan.train_loader->stats().wait_seconds};
  rep.comm.all_reduce_doubles(v);
  return {{"loss_sum", v[0]}, {"correct", v[1]}, {"seen", v[2]}, {"wait_seconds", v[3]},
          {"train_seconds", st.seconds_before + seconds}};
}

// A resumed epoch's figures before this invocation: rank 0 carries the sums (the epoch's end sums
// them over the ranks again), every rank the seconds.
void restore_epoch_stats(const Replica& rep, const RunSpan& span, EpochStats& st) {
  auto get = [&](const char* k) {
    auto it = span.resumed_progress.find(k);
    return it == span.resumed_progress.end() ? 0.0 : it->second;
  };
  st.seconds_before = get("train_seconds");
  if (!rep.lead) return;
  st.loss_sum = get("loss_sum");
  st.correct = get("correct");
  st.seen = get("seen");
  st.wait_before = get("wait_seconds");
}

// What the ranks agreed to do after a step: stop (the signal), save.
struct PollResult {
  int stop = 0;
  bool save = false;
  bool asked = false;  // the save was asked for (SIGUSR1)
};

// The signals as every rank sees them, agreed with one all-reduce of four numbers (every rank calls it
// at the same point; alone it is free): the stop signal any rank received (SIGTERM over SIGINT);
// with `take_saves`, whether any rank was asked to save (SIGUSR1, taken) and whether rank 0's clock
// says train.save_every_minutes is due (`minutes_due`, rank 0's).
struct AgreedSignals {
  int stop = 0;
  bool asked = false, minutes_due = false;
};
AgreedSignals agree_signals(const Replica& rep, bool take_saves, bool minutes_due) {
  const int sig = stop_signal();
  std::vector<double> v{sig != 0 ? 1.0 : 0.0, sig == SIGTERM ? 1.0 : 0.0, take_saves && take_save_request() ? 1.0 : 0.0,
                        take_saves && rep.lead && minutes_due ? 1.0 : 0.0};
  if (rep.world > 1) rep.comm.all_reduce_doubles(v);
  AgreedSignals a;
  a.stop = v[0] > 0 ? (v[1] > 0 ? SIGTERM : SIGINT) : 0;
  a.asked = v[2] > 0;
  a.minutes_due = v[3] > 0;
  return a;
}

// After each step: SIGINT/SIGTERM, SIGUSR1 (tools/engine/interrupt.h) and train.save_every_*.
// Alone, every step; over several ranks every rep.poll_every steps, at the same global steps on every
// rank, with one small all-reduce: a signal that reached any rank (mpirun forwards them to all,
// maybe between two steps) acts on every rank at the same step; the minutes are rank 0's clock.
PollResult poll_interrupts(const Replica& rep, const TrainOptions& opt, const RunProgress& prog) {
  const bool steps_due = opt.save_every_steps > 0 && prog.state.step % opt.save_every_steps == 0;
  if (rep.world > 1 && prog.state.step % rep.poll_every != 0) return PollResult{0, steps_due};
  const bool minutes_due = opt.save_every_minutes > 0 && seconds_since(prog.last_save) >= 60 * opt.save_every_minutes;
  const AgreedSignals a = agree_signals(rep, /*take_saves=*/true, minutes_due);
  return PollResult{a.stop, steps_due || a.asked || a.minutes_due, a.asked};
}

// The progress line's fields after `done` steps of the epoch (`st.seen` images) in `seconds`, with
// the epoch's and the run's elapsed time and ETA (tools/engine/progress.h).
std::string progress_fields(const EpochInputs& in, const EpochStats& st, double seconds, double lr, int64_t done) {
  const Replica& rep = in.rep;
  BatchPlan& plan = in.plan;
  RunStep& step = in.step;
  RunSpan& span = in.span;
  RunProgress& prog = in.prog;
  std::string f = "loss " + fmt("%.4f", st.loss_sum / st.seen) + "  acc " + fmt("%.1f%%", 100 * st.correct / st.seen) +
                  "  lr " + fmt("%.4g", lr) + "  " + fmt("%.0f", st.seen * rep.world / seconds) + " img/s  data " +
                  fmt("%.0f%%", 100 * (st.wait_before + plan.train_loader->stats().wait_seconds) / std::max(seconds, 1e-9));
  if (step.setup.scaler)
    f += "  scale " + fmt("%g", step.setup.scaler->scale()) + "  skipped " + std::to_string(step.setup.scaler->skipped_steps());
  RunClock& c = prog.run_clock;
  if (!c.started) {  // this invocation's first line: its clock starts where this epoch did
    c = RunClock{true, Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)),
                 prog.state.step - done};
  }
  return f + "  " + time_fields(seconds, done, plan.steps_per_epoch, seconds_since(c.start), prog.state.step - c.start_step,
                                span.last_epoch * plan.steps_per_epoch - c.start_step);
}

// Rank 0's step row (tools/engine/metrics.h) after `done` steps of the epoch, every train.log_every
// steps (ten an epoch by default) and at the epoch's end: the epoch's sums so far, which the log
// turns into the interval's.
void write_step_row(const EpochInputs& in, const EpochStats& st, int64_t epoch, double seconds, double lr, int64_t done) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  BatchPlan& plan = in.plan;
  RunStep& step = in.step;
  RunFolder& folder = in.folder;
  RunProgress& prog = in.prog;
  const int64_t every = cfg.opt().log_every > 0 ? cfg.opt().log_every : std::max<int64_t>(1, plan.steps_per_epoch / 10);
  if (!folder.log || st.seen <= 0 || (done % every != 0 && done < plan.steps_per_epoch)) return;
  StepSample sample{prog.state.step, epoch, st.loss_sum, st.correct, st.seen, seconds,
                    st.wait_before + plan.train_loader->stats().wait_seconds, lr,
                    step.setup.scaler ? step.setup.scaler->scale() : 0.0, rep.world};
  if (has_own_memory(rep.device)) sample.blocked_seconds = host_wait_stats().seconds - st.blocked_start;
  folder.log->write_step(sample);
}

// Where a step of epoch `epoch` stands: the epoch's start in this invocation, the step's lr.
struct EpochClock {
  int64_t epoch;
  Clock::time_point t0;
  double lr;
};

// After `done` steps of the epoch: the device's statistics read, the progress line (`bar` updated
// unless null; `fields` kept for the epoch's last line) and the step row.
void read_and_show(const EpochInputs& in, EpochStats& st, const EpochClock& c, int64_t done, Progress* bar,
                   std::string& fields) {
  const Replica& rep = in.rep;
  st.read(in.step.setup, rep.device, c.epoch);
  const double secs = st.seconds_before + seconds_since(c.t0);  // the epoch's, a resumed one's before included
  if (rep.show && st.seen > 0) {
    fields = progress_fields(in, st, secs, c.lr, done);
    if (bar) bar->update(done, fields);
  }
  write_step_row(in, st, c.epoch, secs, c.lr, done);
}

// After the epoch's step `done`: the statistics at log intervals; then signals and periodic saves
// (poll_interrupts): a save mid-epoch (one at the epoch's last step is the epoch end's, after its
// evaluation), and true after a stop (prog.interrupted) has saved.
bool after_step(const EpochInputs& in, EpochStats& st, const EpochClock& c, int64_t done, Progress& bar,
                std::string& fields) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  BatchPlan& plan = in.plan;
  RunProgress& prog = in.prog;
  const bool read_now = done % st.read_every == 0;  // else nothing new to show
  if (read_now) read_and_show(in, st, c, done, &bar, fields);
  const PollResult p = poll_interrupts(rep, cfg.opt(), prog);
  if (p.asked && done == plan.steps_per_epoch) prog.save_asked = true;  // the epoch end's save serves it
  if (!p.stop && !(p.save && done < plan.steps_per_epoch)) return false;
  if (!read_now) st.read(in.step.setup, rep.device, c.epoch);
  prog.interrupted = p.stop;
  save_mid_epoch(in, c.epoch, done, epoch_totals(rep, plan, st, seconds_since(c.t0)));
  return prog.interrupted != 0;
}

// The epoch's loader position (a resumed epoch's batch), and data.progressive_resize's size when it changes.
void start_epoch(const Replica& rep, const RunData& data, Learner& learner, BatchPlan& plan, const RunSpan& span,
                 int64_t epoch, int64_t first_batch) {
  learner.model->train();
  plan.train_loader->start_epoch(epoch, std::min(first_batch, plan.train_loader->batches_per_epoch()));
  plan.train_loader->reset_stats();
  if (rep.show && data.dcfg.progressive_resize.enabled() &&
      (epoch == span.first_epoch || plan.train_loader->epoch_image_shape(epoch) != plan.train_loader->epoch_image_shape(epoch - 1))) {
    const ImageShape sh = plan.train_loader->epoch_image_shape(epoch);
    std::cout << "progressive_resize: epoch " << epoch + 1 << " trains at " << sh.h << "x" << sh.w << "\n";
  }
}

// The epoch's figures summed over ranks into the result; returns them (epoch_totals).
std::map<std::string, double> epoch_result(const EpochInputs& in, const EpochStats& st, double seconds) {
  const Replica& rep = in.rep;
  BatchPlan& plan = in.plan;
  RunStep& step = in.step;
  RunProgress& prog = in.prog;
  std::map<std::string, double> t = epoch_totals(rep, plan, st, seconds);
  const double train_time = t["train_seconds"], seen = std::max(t["seen"], 1.0);
  prog.result.train_loss = t["loss_sum"] / seen;
  prog.result.train_acc = t["correct"] / seen;
  prog.result.images_per_s = t["seen"] / train_time;
  prog.result.data_wait_share = t["wait_seconds"] / rep.world / train_time;
  prog.result.steps = prog.state.step;
  prog.result.peak_bytes = static_cast<double>(allocator_for(rep.device).stats().peak - step.weights_bytes);
  if (step.setup.scaler) {
    prog.result.skipped_steps = step.setup.scaler->skipped_steps();
    prog.result.loss_scale = step.setup.scaler->scale();
  }
  return t;
}

}  // namespace

double run_seconds(const RunConfig& cfg, const RunSpan& span) { return span.seconds_before + seconds_since(cfg.start); }

// Rank 0: the `last` checkpoint at prog.state, with what a second SIGINT/SIGTERM would leave kept true
// (tools/engine/interrupt.h): during the save, the checkpoint before it; after it, this one.
void save_last(const RunConfig& cfg, const Learner& learner, const RunFolder& folder, const RunProgress& prog) {
  set_second_signal_note("the save of step " + std::to_string(prog.state.step) +
                         " is cut short; checkpoints are switched in whole, so kiln train " + folder.dir +
                         " resumes from the one saved before it, if any");
  save_checkpoint(folder.dir + "/last", *learner.model, prog.state, learner.ema ? learner.ema->model.get() : nullptr, cfg.opt().keep_last);
  set_second_signal_note("the checkpoint of step " + std::to_string(prog.state.step) + " is saved: kiln train " +
                         folder.dir + " resumes from it");
}

void save_mid_epoch(const EpochInputs& in, int64_t epoch, int64_t done, const std::map<std::string, double>& totals) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  Learner& learner = in.learner;
  BatchPlan& plan = in.plan;
  RunStep& step = in.step;
  RunFolder& folder = in.folder;
  RunSpan& span = in.span;
  RunProgress& prog = in.prog;
  prog.state.epoch = epoch;
  prog.state.epoch_step = done;
  prog.state.progress = totals;
  prog.state.progress["run_seconds"] = run_seconds(cfg, span);
  prog.state.progress["steps_per_epoch"] = static_cast<double>(plan.steps_per_epoch);
  prog.state.rng = default_generator().state();
  if (step.setup.scaler) prog.state.scaler = step.setup.scaler->state_dict();
  prog.last_save = Clock::now();
  if (!rep.lead) return;
  prog.state.optimizer = learner.optimizer->state_dict();
  save_last(cfg, learner, folder, prog);
  if (rep.show && !prog.interrupted)
    std::cout << (rep.tty ? "\n" : "") << "saved " << folder.dir << "/last at step " << prog.state.step << " (epoch "
              << epoch + 1 << ", batch " << done << " of " << plan.steps_per_epoch << ")\n";
}

EpochOutcome run_epoch(const EpochInputs& in, int64_t epoch) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  const RunData& data = in.data;
  Learner& learner = in.learner;
  BatchPlan& plan = in.plan;
  Schedule& sched = in.sched;
  RunStep& step = in.step;
  RunSpan& span = in.span;
  RunProgress& prog = in.prog;
  const TrainOptions& opt = cfg.opt();
  const int64_t first = epoch == span.first_epoch ? std::min(span.first_batch, plan.steps_per_epoch) : 0;
  start_epoch(rep, data, learner, plan, span, epoch, first);
  Progress bar("train", static_cast<int>(epoch + 1), static_cast<int>(opt.epochs), plan.steps_per_epoch, rep.tty,
               opt.log_every);
  EpochStats st(step.setup, opt, plan.steps_per_epoch);
  if (first > 0) restore_epoch_stats(rep, span, st);
  const auto accumulate_step_stats = accumulate_step_stats_kernel.get(rep.device, "accumulate_step_stats");
  st.acc = Tensor::zeros({5}, DType::f64, rep.device);
  // MixUp/CutMix batches are staged in pinned memory where the device copies from it asynchronously.
  PinnedStaging* const mix_staging = has_pinned_host_memory(rep.device) ? &step.mix_staging : nullptr;
  auto t0 = Clock::now();
  Batch b;
  int64_t i = first;
  std::string fields;
  for (; i < plan.steps_per_epoch && ((i > first && opt.reuse_first_batch) || plan.train_loader->next(b)); ++i) {
    double lr = sched.lr->lr_at(prog.state.step);
    learner.optimizer->set_lr(lr);
    prog.last_lr = lr;
    // train.mixup: the mixed images, soft targets and the labels accuracy counts (data/mix.h), drawn
    // for the whole batch, so that train.accumulate does not change what is mixed.
    MixedBatch mixed =
        mix_batch(opt.mixup, static_cast<uint64_t>(opt.seed), b, data.num_classes, opt.label_smoothing, mix_staging);
    // The shared step (tools/engine/train_step.h): micro-batches (train.accumulate), scaled backward,
    // all-reduce, unscale and check, clip, optimizer step. Each micro-batch's loss and correct
    // count go to the epoch's statistics, accumulated on the device.
    // u8 batches (data.upload) carry their normalize; train_step applies it on the device per
    // micro-batch (batch_images.h).
    StepResult res = train_step(*learner.model, *learner.optimizer, StepBatch{mixed.images, mixed.labels, mixed.targets, b.normalize}, step.setup,
                                [&](const MicroBatchOut& mo) {
                                  accumulate_step_stats(st.acc, mo.loss.detach(), mo.logits32.detach(), mo.labels,
                                                        static_cast<double>(mo.size), i);
                                });
    KILN_CHECK(res.finite || step.setup.scaler, "the loss became ", res.loss, " at epoch ", epoch + 1, ", step ", i + 1,
               "; try a lower learning rate (optim.lr) or gradient clipping (train.clip_grad_norm)");
    // With the fp16 verdict on the device the EMA's kernels read it there (a skipped step leaves the
    // EMA as it is, as a step not taken does below), nothing read back.
    if (res.stepped && learner.ema)
      learner.ema->ema->update(prog.state.step, res.verdict_on_device ? step.setup.scaler->last_step_skipped() : Tensor());
    ++prog.state.step;
    after_step_budget(in, b);
    st.seen += b.size();
    // A skipped fp16 step's non-finite loss is counted by the scaler, not in the mean loss.
    if (after_step(in, st, EpochClock{epoch, t0, lr}, i + 1, bar, fields)) {
      ++i;
      break;
    }
  }
  if (prog.interrupted) {  // the line that ends the run says where it stopped
    if (rep.show && rep.tty) std::cout << "\n";
    return EpochOutcome{seconds_since(t0), i, {}};
  }
  if (i % st.read_every != 0) read_and_show(in, st, EpochClock{epoch, t0, prog.last_lr}, i, nullptr, fields);
  std::map<std::string, double> totals = epoch_result(in, st, seconds_since(t0));
  // An epoch resumed after its last step (its evaluation abandoned) trained nothing here: no line.
  if (rep.show && i > first) bar.finish(fields);
  if (rep.show) std::cout << ops::conv_algo::report_once();  // the first epoch's convolution timing cost
  // data.skip_bad_samples: each loader (train and val) reports what it skipped (data/loader.h).
  const double train_time = totals["train_seconds"];
  return EpochOutcome{train_time, i, std::move(totals)};
}

// --- end of an epoch ----------------------------------------------------------------------------------

void publish(const Replica& rep, const EvalCounts& ec, const char* label, const std::string& what, double& loss,
             double& top1, double& top5) {
  std::vector<double> v{ec.loss_sum, ec.top1, ec.top5, ec.samples};
  rep.comm.all_reduce_doubles(v);
  loss = v[0] / v[3];
  top1 = v[1] / v[3];
  top5 = v[2] / v[3];
  if (rep.show)
    std::cout << label << "   " << what << "  loss " << fmt("%.4f", loss) << "  top1 " << fmt("%.2f%%", 100 * top1)
              << "  top5 " << fmt("%.2f%%", 100 * top5) << "  (" << static_cast<int64_t>(v[3]) << " images)\n";
}

void publish_eval(const Replica& rep, TrainResult& result, const EvalCounts& ec, const std::string& what) {
  publish(rep, ec, "val", what, result.val_loss, result.val_top1, result.val_top5);
}

namespace {

// Whether the ranks agree to stop before evaluation batch k (a SIGINT/SIGTERM; prog.interrupted is set):
// alone at every batch; over several ranks every rep.poll_every batches, at the same batches on every
// rank (their loaders have the same number of batches).
bool eval_should_stop(const Replica& rep, RunProgress& prog, int64_t k) {
  if (rep.world > 1 && k % rep.poll_every != 0) return false;
  prog.interrupted = agree_signals(rep, /*take_saves=*/false, false).stop;  // a SIGUSR1 waits for the training steps
  return prog.interrupted != 0;
}

// The epoch's evaluation (train.eval_every, and the last epoch's), of the live weights and the EMA's;
// the last of this invocation also counts the confusion matrix, for the report. A stop request
// abandons it (prog.interrupted; false).
bool evaluate_epoch(const EpochInputs& in, int64_t epoch) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  const RunData& data = in.data;
  Learner& learner = in.learner;
  BatchPlan& plan = in.plan;
  RunSpan& span = in.span;
  BudgetState& budget = in.budget;
  RunProgress& prog = in.prog;
  const auto eval_start = Clock::now();
  const std::string what = std::to_string(epoch + 1) + "/" + std::to_string(cfg.opt().epochs);
  // The last evaluation counts the confusion matrix; with train.early_stopping any may be the last.
  const bool final_eval = epoch + 1 == span.last_epoch || cfg.opt().early_stopping.enabled();
  const auto stop = [&rep, &prog](int64_t k) { return eval_should_stop(rep, prog, k); };
  if (final_eval) prog.final_confusion.assign(data.num_classes, std::vector<int64_t>(data.num_classes, 0));
  const EvalProgress val_line{"val", epoch + 1, cfg.opt().epochs, rep.tty}, ema_line{"ema", epoch + 1, cfg.opt().epochs, rep.tty};
  EvalCounts ec = run_eval(*learner.model, *plan.val_loader, rep.device, cfg.compute, epoch, data.num_classes,
                           final_eval ? &prog.final_confusion : nullptr, "none", rep.show ? &val_line : nullptr, stop);
  if (ec.abandoned) return false;
  if (final_eval) all_reduce_confusion(rep.comm, prog.final_confusion);
  publish_eval(rep, prog.result, ec, what);
  if (learner.ema) {  // the EMA weights on the same images (tools/engine/train_ema.h)
    EvalCounts ee = run_eval(*learner.ema->model, *plan.val_loader, rep.device, cfg.compute, epoch, data.num_classes, nullptr, "none",
                             rep.show ? &ema_line : nullptr, stop);
    if (ee.abandoned) return false;
    publish(rep, ee, "ema", what, prog.result.ema_val_loss, prog.result.ema_val_top1, prog.result.ema_val_top5);
  }
  budget.last_eval_s = seconds_since(eval_start);
  return true;
}

// Rank 0: the epoch's metrics row (NaN where it did not evaluate).
void write_metrics_row(const EpochInputs& in, int64_t epoch, bool evaluated, double train_time) {
  Learner& learner = in.learner;
  RunFolder& folder = in.folder;
  RunProgress& prog = in.prog;
  const TrainResult& res = prog.result;
  std::vector<std::pair<std::string, double>> row{{"epoch", static_cast<double>(epoch + 1)},
              {"step", static_cast<double>(prog.state.step)},
              {"lr", prog.last_lr},
              {"train_loss", res.train_loss},
              {"train_acc", res.train_acc},
              {"val_loss", evaluated ? res.val_loss : NAN},
              {"val_top1", evaluated ? res.val_top1 : NAN},
              {"val_top5", evaluated ? res.val_top5 : NAN},
              {"images_per_s", res.images_per_s},
              {"data_wait_share", res.data_wait_share},
              {"epoch_seconds", train_time},
              {"skipped_steps", static_cast<double>(res.skipped_steps)},
              {"loss_scale", res.loss_scale}};
  if (learner.ema)
    for (auto [k, x] : {std::pair{"ema_val_loss", res.ema_val_loss}, {"ema_val_top1", res.ema_val_top1},
                        {"ema_val_top5", res.ema_val_top5}})
      row.emplace_back(k, evaluated ? x : NAN);
  folder.log->write(row);
}

// After an evaluation (every rank): train.best_metric's record, and whether this epoch's weights
// become `best` (returned); train.early_stopping's record and its decision, rank 0's on every rank
// (the figures are all-reduced sums, whose roundings ranks need not share): a stop before
// train.epochs makes this epoch this invocation's last, so the run ends as at its end (the `last`
// checkpoint, which records the stop, the plots, the report).
bool watch_metrics(const EpochInputs& in, int64_t epoch) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  RunSpan& span = in.span;
  RunProgress& prog = in.prog;
  const int64_t done = epoch + 1;
  const std::string& by = cfg.opt().best_metric;
  const bool best = update_record(prog.state.best, by, metric_value(prog.result, by), done);
  const EarlyStoppingOptions& es = cfg.opt().early_stopping;
  if (!es.enabled()) return best;
  update_record(prog.state.early_stopping, es.metric, metric_value(prog.result, es.metric), done, es.min_delta);
  const bool due = done < cfg.opt().epochs && early_stop_due(es, prog.state.early_stopping, done);
  std::vector<double> stop{rep.lead && due ? 1.0 : 0.0};
  rep.comm.all_reduce_doubles(stop);
  if (stop[0] > 0) {
    prog.state.stopped_early = prog.result.stopped_early = done;
    span.last_epoch = done;
  }
  return best;
}

// Rank 0: the `last` checkpoint, and `best` when this epoch's weights are (watch_metrics).
void save_checkpoints(const EpochInputs& in, bool best) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  Learner& learner = in.learner;
  RunFolder& folder = in.folder;
  RunProgress& prog = in.prog;
  prog.state.optimizer = learner.optimizer->state_dict();
  Module* ema_model = learner.ema ? learner.ema->model.get() : nullptr;
  save_last(cfg, learner, folder, prog);
  if (best) save_checkpoint(folder.dir + "/best", *learner.model, prog.state, ema_model);
  if (rep.show && prog.save_asked) std::cout << "saved " << folder.dir << "/last at step " << prog.state.step << " (epoch end)\n";
  prog.save_asked = false;
}

}  // namespace

void end_epoch(const EpochInputs& in, int64_t epoch, const EpochOutcome& e) {
  const Replica& rep = in.rep;
  RunConfig& cfg = in.cfg;
  Learner& learner = in.learner;
  RunStep& step = in.step;
  RunFolder& folder = in.folder;
  RunSpan& span = in.span;
  RunProgress& prog = in.prog;
  // Batch-norm running statistics are per replica (each updates them from its own shard). Every
  // replica takes rank 0's before evaluating, so that the evaluation, summed over the replicas'
  // shards, is that of the model the checkpoint saves (rank 0's); the EMA's copies likewise.
  // (PyTorch's DDP broadcasts them before every forward.) All ranks call it at the same point.
  if (rep.world > 1) {
    broadcast_buffers(rep.comm, *learner.model);
    if (learner.ema) broadcast_buffers(rep.comm, *learner.ema->model);
  }
  const bool evaluated = (epoch + 1) % cfg.opt().eval_every == 0 || epoch + 1 == cfg.opt().epochs;
  if (evaluated && !evaluate_epoch(in, epoch)) {  // interrupted: saved as trained, not evaluated
    if (rep.show) std::cout << "val   abandoned (" << signal_name(prog.interrupted) << "); the resumed run evaluates\n";
    save_mid_epoch(in, epoch, e.steps, e.totals);
    return;
  }
  recheck_budget_after(in, epoch, e);
  prog.state.epoch = epoch + 1;
  prog.state.epoch_step = 0;
  prog.state.progress = {{"run_seconds", run_seconds(cfg, span)}};
  prog.last_save = Clock::now();
  prog.state.rng = default_generator().state();
  if (step.setup.scaler) prog.state.scaler = step.setup.scaler->state_dict();
  const bool best = evaluated && watch_metrics(in, epoch);
  if (!rep.lead) return;
  write_metrics_row(in, epoch, evaluated, e.train_seconds);
  save_checkpoints(in, best);
  if (cfg.opt().plots) folder.log->save_plots(folder.dir);  // rewritten every epoch: a long run can be looked at
  if (rep.show && prog.result.stopped_early == epoch + 1)
    std::cout << "early stopping: " << early_stop_reason(cfg.opt().early_stopping, prog.state.early_stopping, epoch + 1)
              << "; stopped after epoch " << epoch + 1 << " of " << cfg.opt().epochs << "\n";
}

}  // namespace kiln::trainer
