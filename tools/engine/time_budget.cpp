// The run's time budget: when to decide and how many epochs fit (see time_budget.h).
#include "tools/engine/time_budget.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>

#include "core/check.h"

namespace kiln {

int64_t budget_decision_step(int64_t steps_per_epoch) {
  KILN_CHECK(steps_per_epoch >= 1, "budget_decision_step: steps_per_epoch = ", steps_per_epoch);
  const int64_t least = kUntimedSteps + kMinMeasuredSteps;
  return std::min(std::max(steps_per_epoch / 10, least), steps_per_epoch);
}

double predicted_run_seconds(const BudgetInput& in, int64_t epochs) {
  const double steps_left = static_cast<double>(std::max<int64_t>(0, epochs * in.steps_per_epoch - in.steps_done));
  // Evaluations still to come: after every eval_every-th epoch past epochs_done, and after the last.
  const int64_t every = std::max<int64_t>(1, in.eval_every);
  const int64_t evals =
      epochs <= in.epochs_done ? 0 : epochs / every - in.epochs_done / every + (epochs % every != 0 ? 1 : 0);
  return in.elapsed_s + steps_left * in.step_s + static_cast<double>(evals) * in.eval_s + in.final_extra_s;
}

BudgetPlan plan_budget(const BudgetInput& in) {
  KILN_CHECK(in.max_epochs >= 1 && in.steps_per_epoch >= 1 && in.budget_s > 0 && in.step_s >= 0 && in.eval_s >= 0 &&
                 in.epochs_done >= 0 && in.epochs_done < in.max_epochs,
             "plan_budget: max_epochs ", in.max_epochs, ", epochs_done ", in.epochs_done, ", steps_per_epoch ",
             in.steps_per_epoch, ", budget ", in.budget_s, " s, step ", in.step_s, " s, evaluation ", in.eval_s, " s");
  const double limit = in.budget_s * (1.0 - in.margin);
  // The predicted time grows with the epochs: the largest that fits, by bisection over [least, max].
  const int64_t least = in.epochs_done + 1;
  BudgetPlan p;
  if (predicted_run_seconds(in, least) > limit) {
    p.epochs = least;
    p.fits = false;
  } else {
    int64_t lo = least, hi = in.max_epochs;  // lo fits
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (predicted_run_seconds(in, mid) <= limit) lo = mid;
      else hi = mid - 1;
    }
    p.epochs = lo;
  }
  p.predicted_s = predicted_run_seconds(in, p.epochs);
  return p;
}

double budget_recent_step_s(const std::vector<double>& epoch_step_s, double decided_step_s) {
  KILN_CHECK(!epoch_step_s.empty() && decided_step_s >= 0, "budget_recent_step_s: ", epoch_step_s.size(),
             " epochs measured, the decision's speed ", decided_step_s, " s/step");
  static_assert(kRecheckEpochs % 2 == 1, "the median of an odd count is one of the measured speeds");
  const size_t n = std::min(epoch_step_s.size(), kRecheckEpochs);
  std::vector<double> recent(kRecheckEpochs - n, decided_step_s);  // epochs not yet measured
  recent.insert(recent.end(), epoch_step_s.end() - static_cast<std::ptrdiff_t>(n), epoch_step_s.end());
  std::nth_element(recent.begin(), recent.begin() + kRecheckEpochs / 2, recent.end());
  return recent[kRecheckEpochs / 2];
}

int64_t recheck_budget(const BudgetInput& in) {
  if (2 * in.epochs_done <= in.max_epochs && in.cap_epochs > in.max_epochs) {  // the first half: raise?
    BudgetInput up = in;
    up.max_epochs = in.cap_epochs;
    up.margin = 2 * in.margin;  // raised only with room to spare: no flip-flop against the lowering
    const BudgetPlan p = plan_budget(up);
    if (p.fits && p.epochs > in.max_epochs) return p.epochs;
  }
  if (predicted_run_seconds(in, in.max_epochs) <= in.budget_s * kRecheckShare) return in.max_epochs;
  return plan_budget(in).epochs;
}

std::string describe_recheck(const BudgetInput& in, int64_t epochs) {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "time budget %.4g min: %lld -> %lld epochs after epoch %lld (at %.4g s/step, %lld epochs are "
                "predicted at %.1f min; %lld at %.1f min)",
                in.budget_s / 60, static_cast<long long>(in.max_epochs), static_cast<long long>(epochs),
                static_cast<long long>(in.epochs_done), in.step_s, static_cast<long long>(in.max_epochs),
                predicted_run_seconds(in, in.max_epochs) / 60, static_cast<long long>(epochs),
                predicted_run_seconds(in, epochs) / 60);
  return buf;
}

namespace {
std::atomic<double> g_test_slowdown{0.0};
}  // namespace

void set_budget_test_slowdown(double seconds_per_step) { g_test_slowdown = seconds_per_step; }
double budget_test_slowdown() { return g_test_slowdown; }

std::string describe_budget(const BudgetInput& in, const BudgetPlan& plan) {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "time budget %.4g min: %lld of at most %lld epochs (predicted %.1f min: %.4g s/step, %.3g s per "
                "evaluation, %.1f min spent before the decision at step %lld)%s",
                in.budget_s / 60, static_cast<long long>(plan.epochs), static_cast<long long>(in.max_epochs),
                plan.predicted_s / 60, in.step_s, in.eval_s, in.elapsed_s / 60, static_cast<long long>(in.steps_done),
                plan.fits ? "" : "; even one epoch is predicted over the budget");
  return buf;
}

}  // namespace kiln
