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
double predict_eval_seconds(ReplicaRun& r, const Batch& batch) {
  NoGradGuard ng;
  r.model->eval();
  const ImageShape vs = r.dcfg.transforms(Split::val).output_shape(r.val_set->image_shape());
  Tensor x = vs.known() ? Tensor::zeros({r.vopt.batch_size, vs.h, vs.w, vs.c}, DType::f32, r.device).to(r.compute)
                        : device_images(batch, r.device, r.compute);
  double best = 0;
  for (int k = 0; k < 2; ++k) {
    const auto t = Clock::now();
    Tensor y = r.model->forward(x);
    synchronize(r.device);
    best = k == 0 ? seconds_since(t) : std::min(best, seconds_since(t));
  }
  r.model->train();
  const double val_images = static_cast<double>(r.val_loader->batches_per_epoch() * r.vopt.batch_size);
  return best / static_cast<double>(x.size(0)) * val_images * (r.ema ? 2 : 1);
}

// After step decide_at: the epochs that fit the budget at this machine's measured speed, rank 0's
// on every rank.
void decide_budget(ReplicaRun& r, const Batch& batch) {
  BudgetState& b = r.budget;
  synchronize(r.device);
  BudgetInput in;
  in.budget_s = b.minutes * 60;
  in.elapsed_s = run_seconds(r);
  in.steps_done = r.state.step;
  in.steps_per_epoch = r.steps_per_epoch;
  in.max_epochs = r.opt.epochs;
  in.eval_every = r.opt.eval_every;
  in.step_s = seconds_since(b.mark_time) / static_cast<double>(b.decide_at - b.mark_at);
  in.eval_s = predict_eval_seconds(r, batch);
  in.final_extra_s = r.opt.tta != "none" ? 2 * in.eval_s : 0;  // flip: two views of every image
  const BudgetPlan plan = plan_budget(in);
  b.in = in;
  b.epoch = r.state.epoch;
  b.step = r.state.step;
  std::vector<double> chosen{r.lead ? static_cast<double>(plan.epochs) : 0.0};  // rank 0's decision, on every rank
  r.comm.all_reduce_doubles(chosen);
  adopt_epochs(r, static_cast<int64_t>(chosen[0]));
  if (r.show) std::cout << (r.tty ? "\n" : "") << describe_budget(in, plan) << "\n";
}

// After a step: the budget's timing mark, then its decision.
void after_step_budget(ReplicaRun& r, const Batch& batch) {
  BudgetState& b = r.budget;
  if (b.pending && r.state.step == b.mark_at && b.mark_at > 0) {
    synchronize(r.device);
    b.mark_time = Clock::now();
  }
  if (b.pending && r.state.step == b.decide_at) decide_budget(r, batch);
}

// Kept (tools/engine/time_budget.h): after every epoch past the decision's, the run is predicted
// again at the last epochs' speed: its epochs lowered if it would overrun, raised (first half only)
// if more fit.
void recheck_budget_after(ReplicaRun& r, int64_t epoch, const EpochOutcome& e) {
  BudgetState& b = r.budget;
  if (!(b.epoch >= 0 && epoch > b.epoch && epoch + 1 < r.opt.epochs)) return;
  BudgetInput in = b.in;
  const double slow = budget_test_slowdown();
  in.elapsed_s = run_seconds(r) + slow * static_cast<double>(r.state.step - b.step);
  in.steps_done = r.state.step;
  in.epochs_done = epoch + 1;
  in.max_epochs = r.opt.epochs;
  in.cap_epochs = b.in.max_epochs;  // train.epochs, as the decision had it
  b.epoch_step_s.push_back(e.train_seconds / static_cast<double>(std::max<int64_t>(e.steps, 1)) + slow);
  in.step_s = budget_recent_step_s(b.epoch_step_s);
  if (b.last_eval_s >= 0) in.eval_s = b.last_eval_s;
  in.final_extra_s = r.opt.tta != "none" ? 2 * in.eval_s : 0;
  std::vector<double> keep{r.lead ? static_cast<double>(recheck_budget(in)) : 0.0};  // rank 0's, on every rank
  r.comm.all_reduce_doubles(keep);
  const int64_t n = static_cast<int64_t>(keep[0]);
  if (n != r.opt.epochs) {
    if (r.show) std::cout << describe_recheck(in, n) << "\n";
    adopt_epochs(r, n);
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

  explicit EpochStats(const ReplicaRun& r)
      : read_every(r.step.read_loss     ? 1
                   : r.opt.log_every > 0 ? r.opt.log_every
                                         : std::max<int64_t>(1, r.steps_per_epoch / 10)) {}

  // Folds the device's accumulators into the host's sums.
  void read(ReplicaRun& r, int64_t epoch) {
    std::vector<double> v = acc.to(Device::cpu()).to_double_vector();
    acc.zero_();
    loss_sum += v[0];
    correct += v[1];
    LossScaler* scaler = r.step.scaler.get();
    if (scaler) scaler->poll();  // device mode: the skips so far; stops after max_nonfinite_steps in a row
    KILN_CHECK(v[2] == 0 || scaler, "the loss became ", v[4], " at epoch ", epoch + 1, ", step ",
               static_cast<int64_t>(v[3]) + 1, " (the loss is read from ", r.device.str(), " every ", read_every,
               " steps); try a lower learning rate (optim.lr) or gradient clipping (train.clip_grad_norm)");
  }
};

// The epoch's figures so far, summed over the ranks (every rank calls it at the same step): what a
// save keeps (TrainingState::progress) so the resumed epoch's row covers it all.
std::map<std::string, double> epoch_totals(ReplicaRun& r, const EpochStats& st, double seconds) {
  std::vector<double> v{st.loss_sum, st.correct, st.seen, st.wait_before + r.train_loader->stats().wait_seconds};
  r.comm.all_reduce_doubles(v);
  return {{"loss_sum", v[0]}, {"correct", v[1]}, {"seen", v[2]}, {"wait_seconds", v[3]},
          {"train_seconds", st.seconds_before + seconds}};
}

// A resumed epoch's figures before this invocation: rank 0 carries the sums (the epoch's end sums
// them over the ranks again), every rank the seconds.
void restore_epoch_stats(const ReplicaRun& r, EpochStats& st) {
  auto get = [&](const char* k) {
    auto it = r.resumed_progress.find(k);
    return it == r.resumed_progress.end() ? 0.0 : it->second;
  };
  st.seconds_before = get("train_seconds");
  if (!r.lead) return;
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
AgreedSignals agree_signals(ReplicaRun& r, bool take_saves, bool minutes_due) {
  const int sig = stop_signal();
  std::vector<double> v{sig != 0 ? 1.0 : 0.0, sig == SIGTERM ? 1.0 : 0.0, take_saves && take_save_request() ? 1.0 : 0.0,
                        take_saves && r.lead && minutes_due ? 1.0 : 0.0};
  if (r.world > 1) r.comm.all_reduce_doubles(v);
  AgreedSignals a;
  a.stop = v[0] > 0 ? (v[1] > 0 ? SIGTERM : SIGINT) : 0;
  a.asked = v[2] > 0;
  a.minutes_due = v[3] > 0;
  return a;
}

// After each step: SIGINT/SIGTERM, SIGUSR1 (tools/engine/interrupt.h) and train.save_every_*.
// Alone, every step; over several ranks every r.poll_every steps, at the same global steps on every
// rank, with one small all-reduce: a signal that reached any rank (mpirun forwards them to all,
// maybe between two steps) acts on every rank at the same step; the minutes are rank 0's clock.
PollResult poll_interrupts(ReplicaRun& r) {
  const TrainOptions& opt = r.opt;
  const bool steps_due = opt.save_every_steps > 0 && r.state.step % opt.save_every_steps == 0;
  if (r.world > 1 && r.state.step % r.poll_every != 0) return PollResult{0, steps_due};
  const bool minutes_due = opt.save_every_minutes > 0 && seconds_since(r.last_save) >= 60 * opt.save_every_minutes;
  const AgreedSignals a = agree_signals(r, /*take_saves=*/true, minutes_due);
  return PollResult{a.stop, steps_due || a.asked || a.minutes_due, a.asked};
}

// The progress line's fields after `done` steps of the epoch (`st.seen` images) in `seconds`, with
// the epoch's and the run's elapsed time and ETA (tools/engine/progress.h).
std::string progress_fields(ReplicaRun& r, const EpochStats& st, double seconds, double lr, int64_t done) {
  std::string f = "loss " + fmt("%.4f", st.loss_sum / st.seen) + "  acc " + fmt("%.1f%%", 100 * st.correct / st.seen) +
                  "  lr " + fmt("%.4g", lr) + "  " + fmt("%.0f", st.seen * r.world / seconds) + " img/s  data " +
                  fmt("%.0f%%", 100 * (st.wait_before + r.train_loader->stats().wait_seconds) / std::max(seconds, 1e-9));
  if (r.step.scaler)
    f += "  scale " + fmt("%g", r.step.scaler->scale()) + "  skipped " + std::to_string(r.step.scaler->skipped_steps());
  RunClock& c = r.run_clock;
  if (!c.started) {  // this invocation's first line: its clock starts where this epoch did
    c = RunClock{true, Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)),
                 r.state.step - done};
  }
  return f + "  " + time_fields(seconds, done, r.steps_per_epoch, seconds_since(c.start), r.state.step - c.start_step,
                                r.last_epoch * r.steps_per_epoch - c.start_step);
}

// Rank 0's step row (tools/engine/metrics.h) after `done` steps of the epoch, every train.log_every
// steps (ten an epoch by default) and at the epoch's end: the epoch's sums so far, which the log
// turns into the interval's.
void write_step_row(ReplicaRun& r, const EpochStats& st, int64_t epoch, double seconds, double lr, int64_t done) {
  const int64_t every = r.opt.log_every > 0 ? r.opt.log_every : std::max<int64_t>(1, r.steps_per_epoch / 10);
  if (!r.log || st.seen <= 0 || (done % every != 0 && done < r.steps_per_epoch)) return;
  StepSample sample{r.state.step, epoch, st.loss_sum, st.correct, st.seen, seconds,
                    st.wait_before + r.train_loader->stats().wait_seconds, lr,
                    r.step.scaler ? r.step.scaler->scale() : 0.0, r.world};
  if (has_own_memory(r.device)) sample.blocked_seconds = host_wait_stats().seconds - st.blocked_start;
  r.log->write_step(sample);
}

// Where a step of epoch `epoch` stands: the epoch's start in this invocation, the step's lr.
struct EpochClock {
  int64_t epoch;
  Clock::time_point t0;
  double lr;
};

// After `done` steps of the epoch: the device's statistics read, the progress line (`bar` updated
// unless null; `fields` kept for the epoch's last line) and the step row.
void read_and_show(ReplicaRun& r, EpochStats& st, const EpochClock& c, int64_t done, Progress* bar, std::string& fields) {
  st.read(r, c.epoch);
  const double secs = st.seconds_before + seconds_since(c.t0);  // the epoch's, a resumed one's before included
  if (r.show && st.seen > 0) {
    fields = progress_fields(r, st, secs, c.lr, done);
    if (bar) bar->update(done, fields);
  }
  write_step_row(r, st, c.epoch, secs, c.lr, done);
}

// After the epoch's step `done`: the statistics at log intervals; then signals and periodic saves
// (poll_interrupts): a save mid-epoch (one at the epoch's last step is the epoch end's, after its
// evaluation), and true after a stop (r.interrupted) has saved.
bool after_step(ReplicaRun& r, EpochStats& st, const EpochClock& c, int64_t done, Progress& bar, std::string& fields) {
  const bool read_now = done % st.read_every == 0;  // else nothing new to show
  if (read_now) read_and_show(r, st, c, done, &bar, fields);
  const PollResult p = poll_interrupts(r);
  if (p.asked && done == r.steps_per_epoch) r.save_asked = true;  // the epoch end's save serves it
  if (!p.stop && !(p.save && done < r.steps_per_epoch)) return false;
  if (!read_now) st.read(r, c.epoch);
  r.interrupted = p.stop;
  save_mid_epoch(r, c.epoch, done, epoch_totals(r, st, seconds_since(c.t0)));
  return r.interrupted != 0;
}

// The epoch's loader position (a resumed epoch's batch), and data.progressive_resize's size when it changes.
void start_epoch(ReplicaRun& r, int64_t epoch, int64_t first_batch) {
  r.model->train();
  r.train_loader->start_epoch(epoch, std::min(first_batch, r.train_loader->batches_per_epoch()));
  r.train_loader->reset_stats();
  if (r.show && r.dcfg.progressive_resize.enabled() &&
      (epoch == r.first_epoch || r.train_loader->epoch_image_shape(epoch) != r.train_loader->epoch_image_shape(epoch - 1))) {
    const ImageShape sh = r.train_loader->epoch_image_shape(epoch);
    std::cout << "progressive_resize: epoch " << epoch + 1 << " trains at " << sh.h << "x" << sh.w << "\n";
  }
}

// The epoch's figures summed over ranks into the result; returns them (epoch_totals).
std::map<std::string, double> epoch_result(ReplicaRun& r, const EpochStats& st, double seconds) {
  std::map<std::string, double> t = epoch_totals(r, st, seconds);
  const double train_time = t["train_seconds"], seen = std::max(t["seen"], 1.0);
  r.result.train_loss = t["loss_sum"] / seen;
  r.result.train_acc = t["correct"] / seen;
  r.result.images_per_s = t["seen"] / train_time;
  r.result.data_wait_share = t["wait_seconds"] / r.world / train_time;
  r.result.steps = r.state.step;
  r.result.peak_bytes = static_cast<double>(allocator_for(r.device).stats().peak - r.weights_bytes);
  if (r.step.scaler) {
    r.result.skipped_steps = r.step.scaler->skipped_steps();
    r.result.loss_scale = r.step.scaler->scale();
  }
  return t;
}

}  // namespace

double run_seconds(const ReplicaRun& r) { return r.seconds_before + seconds_since(r.start); }

// Rank 0: the `last` checkpoint at r.state, with what a second SIGINT/SIGTERM would leave kept true
// (tools/engine/interrupt.h): during the save, the checkpoint before it; after it, this one.
void save_last(ReplicaRun& r) {
  set_second_signal_note("the save of step " + std::to_string(r.state.step) +
                         " is cut short; checkpoints are switched in whole, so kiln train " + r.run_dir +
                         " resumes from the one saved before it, if any");
  save_checkpoint(r.run_dir + "/last", *r.model, r.state, r.ema ? r.ema->model.get() : nullptr, r.opt.keep_last);
  set_second_signal_note("the checkpoint of step " + std::to_string(r.state.step) + " is saved: kiln train " +
                         r.run_dir + " resumes from it");
}

void save_mid_epoch(ReplicaRun& r, int64_t epoch, int64_t done, const std::map<std::string, double>& totals) {
  r.state.epoch = epoch;
  r.state.epoch_step = done;
  r.state.progress = totals;
  r.state.progress["run_seconds"] = run_seconds(r);
  r.state.progress["steps_per_epoch"] = static_cast<double>(r.steps_per_epoch);
  r.state.rng = default_generator().state();
  if (r.step.scaler) r.state.scaler = r.step.scaler->state_dict();
  r.last_save = Clock::now();
  if (!r.lead) return;
  r.state.optimizer = r.optimizer->state_dict();
  save_last(r);
  if (r.show && !r.interrupted)
    std::cout << (r.tty ? "\n" : "") << "saved " << r.run_dir << "/last at step " << r.state.step << " (epoch "
              << epoch + 1 << ", batch " << done << " of " << r.steps_per_epoch << ")\n";
}

EpochOutcome run_epoch(ReplicaRun& r, int64_t epoch) {
  const TrainOptions& opt = r.opt;
  const int64_t first = epoch == r.first_epoch ? std::min(r.first_batch, r.steps_per_epoch) : 0;
  start_epoch(r, epoch, first);
  Progress bar("train", static_cast<int>(epoch + 1), static_cast<int>(opt.epochs), r.steps_per_epoch, r.tty,
               opt.log_every);
  EpochStats st(r);
  if (first > 0) restore_epoch_stats(r, st);
  const auto accumulate_step_stats = accumulate_step_stats_kernel.get(r.device, "accumulate_step_stats");
  st.acc = Tensor::zeros({5}, DType::f64, r.device);
  // MixUp/CutMix batches are staged in pinned memory where the device copies from it asynchronously.
  PinnedStaging* const mix_staging = has_pinned_host_memory(r.device) ? &r.mix_staging : nullptr;
  auto t0 = Clock::now();
  Batch b;
  int64_t i = first;
  std::string fields;
  for (; i < r.steps_per_epoch && ((i > first && opt.reuse_first_batch) || r.train_loader->next(b)); ++i) {
    double lr = r.schedule->lr_at(r.state.step);
    r.optimizer->set_lr(lr);
    r.last_lr = lr;
    // train.mixup: the mixed images, soft targets and the labels accuracy counts (data/mix.h), drawn
    // for the whole batch, so that train.accumulate does not change what is mixed.
    MixedBatch mixed =
        mix_batch(opt.mixup, static_cast<uint64_t>(opt.seed), b, r.num_classes, opt.label_smoothing, mix_staging);
    // The shared step (tools/engine/train_step.h): micro-batches (train.accumulate), scaled backward,
    // all-reduce, unscale and check, clip, optimizer step. Each micro-batch's loss and correct
    // count go to the epoch's statistics, accumulated on the device.
    // u8 batches (data.upload) carry their normalize; train_step applies it on the device per
    // micro-batch (batch_images.h).
    StepResult res = train_step(*r.model, *r.optimizer, StepBatch{mixed.images, mixed.labels, mixed.targets, b.normalize}, r.step,
                                [&](const MicroBatchOut& mo) {
                                  accumulate_step_stats(st.acc, mo.loss.detach(), mo.logits32.detach(), mo.labels,
                                                        static_cast<double>(mo.size), i);
                                });
    KILN_CHECK(res.finite || r.step.scaler, "the loss became ", res.loss, " at epoch ", epoch + 1, ", step ", i + 1,
               "; try a lower learning rate (optim.lr) or gradient clipping (train.clip_grad_norm)");
    // With the fp16 verdict on the device the EMA's kernels read it there (a skipped step leaves the
    // EMA as it is, as a step not taken does below), nothing read back.
    if (res.stepped && r.ema)
      r.ema->ema->update(r.state.step, res.verdict_on_device ? r.step.scaler->last_step_skipped() : Tensor());
    ++r.state.step;
    after_step_budget(r, b);
    st.seen += b.size();
    // A skipped fp16 step's non-finite loss is counted by the scaler, not in the mean loss.
    if (after_step(r, st, EpochClock{epoch, t0, lr}, i + 1, bar, fields)) {
      ++i;
      break;
    }
  }
  if (r.interrupted) {  // the line that ends the run says where it stopped
    if (r.show && r.tty) std::cout << "\n";
    return EpochOutcome{seconds_since(t0), i, {}};
  }
  if (i % st.read_every != 0) read_and_show(r, st, EpochClock{epoch, t0, r.last_lr}, i, nullptr, fields);
  std::map<std::string, double> totals = epoch_result(r, st, seconds_since(t0));
  // An epoch resumed after its last step (its evaluation abandoned) trained nothing here: no line.
  if (r.show && i > first) bar.finish(fields);
  if (r.show) std::cout << ops::conv_algo::report_once();  // the first epoch's convolution timing cost
  // data.skip_bad_samples: each loader (train and val) reports what it skipped (data/loader.h).
  const double train_time = totals["train_seconds"];
  return EpochOutcome{train_time, i, std::move(totals)};
}

// --- end of an epoch ----------------------------------------------------------------------------------

void publish(ReplicaRun& r, const EvalCounts& ec, const char* label, const std::string& what, double& loss,
             double& top1, double& top5) {
  std::vector<double> v{ec.loss_sum, ec.top1, ec.top5, ec.samples};
  r.comm.all_reduce_doubles(v);
  loss = v[0] / v[3];
  top1 = v[1] / v[3];
  top5 = v[2] / v[3];
  if (r.show)
    std::cout << label << "   " << what << "  loss " << fmt("%.4f", loss) << "  top1 " << fmt("%.2f%%", 100 * top1)
              << "  top5 " << fmt("%.2f%%", 100 * top5) << "  (" << static_cast<int64_t>(v[3]) << " images)\n";
}

void publish_eval(ReplicaRun& r, const EvalCounts& ec, const std::string& what) {
  publish(r, ec, "val", what, r.result.val_loss, r.result.val_top1, r.result.val_top5);
}

namespace {

// Whether the ranks agree to stop before evaluation batch k (a SIGINT/SIGTERM; r.interrupted is set):
// alone at every batch; over several ranks every r.poll_every batches, at the same batches on every
// rank (their loaders have the same number of batches).
bool eval_should_stop(ReplicaRun& r, int64_t k) {
  if (r.world > 1 && k % r.poll_every != 0) return false;
  r.interrupted = agree_signals(r, /*take_saves=*/false, false).stop;  // a SIGUSR1 waits for the training steps
  return r.interrupted != 0;
}

// The epoch's evaluation (train.eval_every, and the last epoch's), of the live weights and the EMA's;
// the last of this invocation also counts the confusion matrix, for the report. A stop request
// abandons it (r.interrupted; false).
bool evaluate_epoch(ReplicaRun& r, int64_t epoch) {
  const auto eval_start = Clock::now();
  const std::string what = std::to_string(epoch + 1) + "/" + std::to_string(r.opt.epochs);
  // The last evaluation counts the confusion matrix; with train.early_stopping any may be the last.
  const bool final_eval = epoch + 1 == r.last_epoch || r.opt.early_stopping.enabled();
  const auto stop = [&r](int64_t k) { return eval_should_stop(r, k); };
  if (final_eval) r.final_confusion.assign(r.num_classes, std::vector<int64_t>(r.num_classes, 0));
  const EvalProgress val_line{"val", epoch + 1, r.opt.epochs, r.tty}, ema_line{"ema", epoch + 1, r.opt.epochs, r.tty};
  EvalCounts ec = run_eval(*r.model, *r.val_loader, r.device, r.compute, epoch, r.num_classes,
                           final_eval ? &r.final_confusion : nullptr, "none", r.show ? &val_line : nullptr, stop);
  if (ec.abandoned) return false;
  if (final_eval) all_reduce_confusion(r.comm, r.final_confusion);
  publish_eval(r, ec, what);
  if (r.ema) {  // the EMA weights on the same images (tools/engine/train_ema.h)
    EvalCounts ee = run_eval(*r.ema->model, *r.val_loader, r.device, r.compute, epoch, r.num_classes, nullptr, "none",
                             r.show ? &ema_line : nullptr, stop);
    if (ee.abandoned) return false;
    publish(r, ee, "ema", what, r.result.ema_val_loss, r.result.ema_val_top1, r.result.ema_val_top5);
  }
  r.budget.last_eval_s = seconds_since(eval_start);
  return true;
}

// Rank 0: the epoch's metrics row (NaN where it did not evaluate).
void write_metrics_row(ReplicaRun& r, int64_t epoch, bool evaluated, double train_time) {
  const TrainResult& res = r.result;
  std::vector<std::pair<std::string, double>> row{{"epoch", static_cast<double>(epoch + 1)},
              {"step", static_cast<double>(r.state.step)},
              {"lr", r.last_lr},
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
  if (r.ema)
    for (auto [k, x] : {std::pair{"ema_val_loss", res.ema_val_loss}, {"ema_val_top1", res.ema_val_top1},
                        {"ema_val_top5", res.ema_val_top5}})
      row.emplace_back(k, evaluated ? x : NAN);
  r.log->write(row);
}

// After an evaluation (every rank): train.best_metric's record, and whether this epoch's weights
// become `best` (returned); train.early_stopping's record and its decision, rank 0's on every rank
// (the figures are all-reduced sums, whose roundings ranks need not share): a stop before
// train.epochs makes this epoch this invocation's last, so the run ends as at its end (the `last`
// checkpoint, which records the stop, the plots, the report).
bool watch_metrics(ReplicaRun& r, int64_t epoch) {
  const int64_t done = epoch + 1;
  const std::string& by = r.opt.best_metric;
  const bool best = update_record(r.state.best, by, metric_value(r.result, by), done);
  const EarlyStoppingOptions& es = r.opt.early_stopping;
  if (!es.enabled()) return best;
  update_record(r.state.early_stopping, es.metric, metric_value(r.result, es.metric), done, es.min_delta);
  const bool due = done < r.opt.epochs && early_stop_due(es, r.state.early_stopping, done);
  std::vector<double> stop{r.lead && due ? 1.0 : 0.0};
  r.comm.all_reduce_doubles(stop);
  if (stop[0] > 0) {
    r.state.stopped_early = r.result.stopped_early = done;
    r.last_epoch = done;
  }
  return best;
}

// Rank 0: the `last` checkpoint, and `best` when this epoch's weights are (watch_metrics).
void save_checkpoints(ReplicaRun& r, bool best) {
  r.state.optimizer = r.optimizer->state_dict();
  Module* ema_model = r.ema ? r.ema->model.get() : nullptr;
  save_last(r);
  if (best) save_checkpoint(r.run_dir + "/best", *r.model, r.state, ema_model);
  if (r.show && r.save_asked) std::cout << "saved " << r.run_dir << "/last at step " << r.state.step << " (epoch end)\n";
  r.save_asked = false;
}

}  // namespace

void end_epoch(ReplicaRun& r, int64_t epoch, const EpochOutcome& e) {
  // Batch-norm running statistics are per replica (each updates them from its own shard). Every
  // replica takes rank 0's before evaluating, so that the evaluation, summed over the replicas'
  // shards, is that of the model the checkpoint saves (rank 0's); the EMA's copies likewise.
  // (PyTorch's DDP broadcasts them before every forward.) All ranks call it at the same point.
  if (r.world > 1) {
    broadcast_buffers(r.comm, *r.model);
    if (r.ema) broadcast_buffers(r.comm, *r.ema->model);
  }
  const bool evaluated = (epoch + 1) % r.opt.eval_every == 0 || epoch + 1 == r.opt.epochs;
  if (evaluated && !evaluate_epoch(r, epoch)) {  // interrupted: saved as trained, not evaluated
    if (r.show) std::cout << "val   abandoned (" << signal_name(r.interrupted) << "); the resumed run evaluates\n";
    save_mid_epoch(r, epoch, e.steps, e.totals);
    return;
  }
  recheck_budget_after(r, epoch, e);
  r.state.epoch = epoch + 1;
  r.state.epoch_step = 0;
  r.state.progress = {{"run_seconds", run_seconds(r)}};
  r.last_save = Clock::now();
  r.state.rng = default_generator().state();
  if (r.step.scaler) r.state.scaler = r.step.scaler->state_dict();
  const bool best = evaluated && watch_metrics(r, epoch);
  if (!r.lead) return;
  write_metrics_row(r, epoch, evaluated, e.train_seconds);
  save_checkpoints(r, best);
  if (r.opt.plots) r.log->save_plots(r.run_dir);  // rewritten every epoch: a long run can be looked at
  if (r.show && r.result.stopped_early == epoch + 1)
    std::cout << "early stopping: " << early_stop_reason(r.opt.early_stopping, r.state.early_stopping, epoch + 1)
              << "; stopped after epoch " << epoch + 1 << " of " << r.opt.epochs << "\n";
}

}  // namespace kiln::trainer
