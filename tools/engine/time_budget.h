// A wall-clock budget for a whole run (`train.time_budget_minutes`): the trainer measures this
// machine's speed early in the first epoch and lowers `train.epochs` to the most epochs whose
// training and evaluations fit the budget, before the schedule's shape depends on it, so the
// learning rate still anneals to its end within the budget (a run cut off by a timer would stop
// at a high learning rate). `train.epochs` is the upper bound.
//
//   "train": {"epochs": 24, "time_budget_minutes": 30}
//
// When: after a tenth of the first epoch, and at least kUntimedSteps + kMinMeasuredSteps steps (at
// most the whole first epoch). The steps before the decision follow the schedule of `train.epochs`
// (the upper bound), those after it the schedule of the decided epochs, which the run folder's
// config.json then records. A constant schedule does not depend on the epochs, so the run is
// exactly the run with `train.epochs` set to the decision; a cosine schedule's lr at step t differs
// between the two by less than a^2 / 4 relative, a = pi * t / (the decided run's steps): 1e-4
// for a decision at a tenth of the first of 16 epochs. A first epoch of fewer than
// kUntimedSteps + 1 steps is timed whole, set-up included: a high estimate, fewer epochs.
// What: the seconds per step over the timed steps (the first steps, which pay for one-off
// set-up such as kernel generation and convolution algorithm measurement, are not timed), the
// seconds of one evaluation (the model's forward in evaluation mode, timed on the current batch,
// times the validation images; twice with train.ema; the final test-time augmentation's views
// on top), and the time already spent since the trainer started (data, model, set-up).
// Kept: the machine's speed drifts (a shared virtual machine's by 20-40% over minutes), so the
// decision is checked again at the end of every later epoch (recheck_budget) with the speed of the
// last kRecheckEpochs epochs (their median, the decision's speed standing in for epochs not yet run)
// and the measured time of the last evaluation. Only when the run is then
// predicted past kRecheckShare of the budget are the epochs lowered, to the most that fit (at least
// one more): the schedule is rebuilt for them, so the learning rate still anneals to its end, with a
// step down in lr at that epoch instead of a run that overruns its budget. In the first half of the
// run (a cosine's lr still above half its peak, so the step up is small) they are also raised, up to
// `train.epochs`, when more are predicted to fit the budget less twice the margin (96%; lowered past
// 99%, to 98%: noise does not move them back and forth): a decision taken in a slow minute is not
// kept for the whole run. Later they are never raised (that would lift a low lr again).
// Tests: tests/engine/time_budget_test.cpp. Docs: docs/training.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

inline constexpr int64_t kMinMeasuredSteps = 20;  // timed steps before a decision, when the epoch has them
inline constexpr int64_t kUntimedSteps = 3;       // first steps not timed (one-off set-up)
inline constexpr double kBudgetMargin = 0.02;     // share of the budget kept free for what is not modelled
inline constexpr double kRecheckShare = 0.99;     // a recheck lowers the epochs past this share of the budget
inline constexpr size_t kRecheckEpochs = 3;       // a recheck's speed: the median of the last epochs' (odd)

// The number of steps done when the decision is taken: a tenth of the first epoch, at least
// kUntimedSteps + kMinMeasuredSteps, at most the whole first epoch.
int64_t budget_decision_step(int64_t steps_per_epoch);

struct BudgetInput {
  double budget_s = 0;           // the whole run's budget
  double elapsed_s = 0;          // spent since the run started, at the decision
  int64_t steps_done = 0;        // optimizer steps done at the decision
  int64_t epochs_done = 0;       // epochs finished at the decision (0: in the first epoch)
  int64_t steps_per_epoch = 1;
  int64_t max_epochs = 1;        // train.epochs (a recheck: the run's current epochs)
  int64_t cap_epochs = 0;        // a recheck: train.epochs as configured, the most it may raise to
  int64_t eval_every = 1;        // train.eval_every (the last epoch always evaluates)
  double step_s = 0;             // measured seconds per training step
  double eval_s = 0;             // seconds of one evaluation (with the EMA's when on)
  double final_extra_s = 0;      // the end's extra evaluation (test-time augmentation), 0 without
  double margin = kBudgetMargin;
};

struct BudgetPlan {
  int64_t epochs = 1;        // the most epochs that fit, in [1, max_epochs]
  double predicted_s = 0;    // the predicted wall time of the whole run with them
  bool fits = true;          // false when even one epoch is predicted over the budget
};

// The largest number of epochs N in [epochs_done + 1, max_epochs] whose predicted run time,
// elapsed + the remaining steps of N epochs + the evaluations after epochs_done + the final extra,
// is within budget * (1 - margin); epochs_done + 1 when none is (fits = false).
BudgetPlan plan_budget(const BudgetInput& in);

// The seconds per step a recheck predicts with: the median of the last kRecheckEpochs entries of
// `epoch_step_s` (each epoch's since the decision's); while fewer epochs have been measured, the
// decision's speed (`decided_step_s`) stands in for the missing ones. So one slow epoch on a noisy
// machine, also the first after the decision, does not move the prediction (its time is counted
// in the elapsed time all the same), while a slowdown that lasts two epochs of three shows.
double budget_recent_step_s(const std::vector<double>& epoch_step_s, double decided_step_s);

// The check at the end of a later epoch: `in` as at a decision, with epochs_done the epochs
// finished, steps_done their steps, step_s the recent speed (budget_recent_step_s), eval_s the last
// evaluation's measured time, max_epochs the run's current epochs and cap_epochs train.epochs.
// Returns the epochs to train: while epochs_done <= max_epochs / 2, the most that fit the budget
// less twice the margin, up to cap_epochs, if that is more than max_epochs; else max_epochs while
// the run is predicted within kRecheckShare of the budget, and plan_budget(in)'s (fewer) when it is
// not. (Raised to fit 96%, lowered past 99% to fit 98%: a few percent of noise moves nothing.)
int64_t recheck_budget(const BudgetInput& in);

// One line for the log when a recheck changes the epochs: "time budget 30 min: 24 -> 21 epochs after
// epoch 9 (at 0.252 s/step, 24 epochs are predicted at 31.6 min; 21 at 29.3 min)".
std::string describe_recheck(const BudgetInput& in, int64_t epochs);

// Tests only: seconds the budget's clock adds to every training step after the decision, which the
// trainer's rechecks then see as a slower machine (the training itself is unchanged). 0 otherwise.
void set_budget_test_slowdown(double seconds_per_step);
double budget_test_slowdown();

// The predicted wall time of a run of `epochs` epochs (what plan_budget compares).
double predicted_run_seconds(const BudgetInput& in, int64_t epochs);

// One line for the log: "time budget 30 min: 16 of at most 24 epochs (predicted 29.1 min: 0.212 s/step,
// 4.1 s per evaluation, 2.3 min spent before the decision)".
std::string describe_budget(const BudgetInput& in, const BudgetPlan& plan);

}  // namespace kiln
