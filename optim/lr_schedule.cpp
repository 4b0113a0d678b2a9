// Learning-rate schedules (closed forms; see the header for the per-iteration choices).
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kiln {

void WarmupOptions::read(JsonReader& r) {
  warmup_epochs = r.get("warmup_epochs", warmup_epochs, 0.0, 1e6);
  warmup_steps = r.get("warmup_steps", warmup_steps, int64_t(0), int64_t(1) << 40);
  warmup_start_factor = r.get("warmup_start_factor", warmup_start_factor, 0.0, 1.0);
  KILN_CHECK(warmup_epochs == 0 || warmup_steps == 0, "config: ", r.path_of("warmup_epochs"), " and ",
             r.path_of("warmup_steps"), " are both set; give one of them");
}

void WarmupOptions::write(json& j) const {
  j["warmup_epochs"] = warmup_epochs;
  j["warmup_steps"] = warmup_steps;
  j["warmup_start_factor"] = warmup_start_factor;
}

int64_t WarmupOptions::length(const ScheduleContext& c) const {
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<int64_t>(std::llround(warmup_epochs * static_cast<double>(c.steps_per_epoch)));
}

ConstantLROptions ConstantLROptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  ConstantLROptions o;
  o.read(r);
  r.finish();
  return o;
}

json ConstantLROptions::to_json() const {
  json j = {{"name", "constant"}};
  write(j);
  return j;
}

StepLROptions StepLROptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  StepLROptions o;
  o.step_size = r.get("step_size", o.step_size, int64_t(1), int64_t(1) << 40);
  o.gamma = r.get("gamma", o.gamma, 0.0, 1.0);
  o.read(r);
  r.finish();
  return o;
}

json StepLROptions::to_json() const {
  json j = {{"name", "step"}, {"step_size", step_size}, {"gamma", gamma}};
  write(j);
  return j;
}

MultiStepLROptions MultiStepLROptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  MultiStepLROptions o;
  o.milestones = r.get_ints("milestones", o.milestones);
  for (size_t i = 0; i < o.milestones.size(); ++i) {
    KILN_CHECK(o.milestones[i] >= 1, "config: ", r.path_of("milestones"), "[", i, "] = ", o.milestones[i],
               " must be an epoch >= 1");
    KILN_CHECK(i == 0 || o.milestones[i] > o.milestones[i - 1], "config: ", r.path_of("milestones"), " = ",
               shape_str(o.milestones), " must be strictly increasing");
  }
  o.gamma = r.get("gamma", o.gamma, 0.0, 1.0);
  o.read(r);
  r.finish();
  return o;
}

json MultiStepLROptions::to_json() const {
  json j = {{"name", "multistep"}, {"milestones", milestones}, {"gamma", gamma}};
  write(j);
  return j;
}

CosineLROptions CosineLROptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  CosineLROptions o;
  o.min_lr = r.get("min_lr", o.min_lr, 0.0, 1e6);
  o.read(r);
  r.finish();
  return o;
}

json CosineLROptions::to_json() const {
  json j = {{"name", "cosine"}, {"min_lr", min_lr}};
  write(j);
  return j;
}

PolyLROptions PolyLROptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  PolyLROptions o;
  o.power = r.get("power", o.power, 0.0, 100.0);
  o.end_lr = r.get("end_lr", o.end_lr, 0.0, 1e6);
  o.read(r);
  r.finish();
  return o;
}

json PolyLROptions::to_json() const {
  json j = {{"name", "poly"}, {"power", power}, {"end_lr", end_lr}};
  write(j);
  return j;
}

LrSchedule::LrSchedule(const ScheduleContext& context, const WarmupOptions& warmup)
    : context_(context), warmup_(warmup) {
  KILN_CHECK(std::isfinite(context.base_lr) && context.base_lr >= 0, "schedule: base lr must be >= 0, got ",
             context.base_lr);
  KILN_CHECK(context.steps_per_epoch >= 1, "schedule: steps_per_epoch must be >= 1, got ", context.steps_per_epoch);
  KILN_CHECK(context.epochs >= 1, "schedule: epochs must be >= 1, got ", context.epochs);
  KILN_CHECK(warmup.warmup_epochs >= 0 && warmup.warmup_steps >= 0, "schedule: negative warm-up length");
  KILN_CHECK(warmup.warmup_epochs == 0 || warmup.warmup_steps == 0,
             "schedule: warmup_epochs and warmup_steps are both set; give one of them");
  KILN_CHECK(warmup.warmup_start_factor >= 0 && warmup.warmup_start_factor <= 1,
             "schedule: warmup_start_factor must be in [0, 1], got ", warmup.warmup_start_factor);
  warmup_length_ = warmup.length(context);
}

double LrSchedule::warmup_factor(int64_t step) const {
  if (step >= warmup_length_) return 1.0;
  double s = warmup_.warmup_start_factor;
  return s + (1.0 - s) * static_cast<double>(step) / static_cast<double>(warmup_length_);
}

double LrSchedule::lr_at(int64_t step) const {
  KILN_CHECK(step >= 0, "schedule: step must be >= 0, got ", step);
  return main_lr(step) * warmup_factor(step);
}

StepLR::StepLR(const ScheduleContext& c, StepLROptions o) : LrSchedule(c, o), options_(std::move(o)) {
  KILN_CHECK(options_.step_size >= 1, "step schedule: step_size must be >= 1 epoch, got ", options_.step_size);
}

double StepLR::main_lr(int64_t step) const {
  return context_.base_lr * std::pow(options_.gamma, static_cast<double>(epoch_of(step) / options_.step_size));
}

MultiStepLR::MultiStepLR(const ScheduleContext& c, MultiStepLROptions o) : LrSchedule(c, o), options_(std::move(o)) {
  KILN_CHECK(std::is_sorted(options_.milestones.begin(), options_.milestones.end()) &&
                 std::adjacent_find(options_.milestones.begin(), options_.milestones.end()) == options_.milestones.end(),
             "multistep schedule: milestones ", shape_str(options_.milestones), " must be strictly increasing");
}

double MultiStepLR::main_lr(int64_t step) const {
  const auto& m = options_.milestones;
  auto passed = std::upper_bound(m.begin(), m.end(), epoch_of(step)) - m.begin();  // bisect_right
  return context_.base_lr * std::pow(options_.gamma, static_cast<double>(passed));
}

CosineLR::CosineLR(const ScheduleContext& c, CosineLROptions o) : LrSchedule(c, o), options_(std::move(o)) {
  KILN_CHECK(options_.min_lr >= 0, "cosine schedule: min_lr must be >= 0, got ", options_.min_lr);
}

double CosineLR::main_lr(int64_t step) const {
  const double total = static_cast<double>(context_.epochs) * static_cast<double>(context_.steps_per_epoch);
  const double t = std::min(static_cast<double>(step), total);
  const double eta_min = options_.min_lr;
  return eta_min + (context_.base_lr - eta_min) * (1.0 + std::cos(std::numbers::pi * t / total)) / 2.0;
}

PolyLR::PolyLR(const ScheduleContext& c, PolyLROptions o) : LrSchedule(c, o), options_(std::move(o)) {
  KILN_CHECK(std::isfinite(options_.power) && options_.power >= 0, "poly schedule: power must be >= 0, got ",
             options_.power);
  KILN_CHECK(options_.end_lr >= 0 && options_.end_lr <= c.base_lr, "poly schedule: end_lr = ", options_.end_lr,
             " is not accepted; accepted: 0..", c.base_lr, " (the optimizer's lr, which it decays to end_lr)");
}

double PolyLR::main_lr(int64_t step) const {
  // The decay runs from the end of the warm-up to the end of the run (at least one step).
  const double total = static_cast<double>(context_.epochs) * static_cast<double>(context_.steps_per_epoch);
  const double w = static_cast<double>(warmup_length_);
  const double span = std::max(1.0, total - w);
  const double t = std::clamp(static_cast<double>(step) - w, 0.0, span);
  return options_.end_lr + (context_.base_lr - options_.end_lr) * std::pow(1.0 - t / span, options_.power);
}

}  // namespace kiln
