// Learning-rate schedules: the lr as a pure function of the global iteration (0-based), so resuming
// needs only the step count. Built from the config's "schedule" section:
//
//   "schedule": {"name": "multistep", "milestones": [30, 60, 80], "gamma": 0.1, "warmup_epochs": 5}
//
// Types (closed forms of the PyTorch schedulers, base = the optimizer's lr, e = epoch of the step):
//   constant   base
//   step       base * gamma^floor(e / step_size)                  StepLR
//   multistep  base * gamma^(number of milestones <= e)           MultiStepLR
//   cosine     min_lr + (base - min_lr) * (1 + cos(pi * t / T)) / 2  CosineAnnealingLR, T = epochs * steps_per_epoch
//   poly       end_lr + (base - end_lr) * (1 - t / T)^power, t = step - W, T = epochs * steps_per_epoch - W
//              (W = the warm-up length; base during the warm-up, end_lr from T on)
//
// Per-iteration evaluation (our choice): step and multistep use the whole epoch e = floor(step /
// steps_per_epoch), so the lr drops exactly at epoch boundaries, as StepLR/MultiStepLR stepped
// once per epoch; cosine uses the iteration itself (t = step, a smooth curve: CosineAnnealingLR
// stepped per iteration with T_max = epochs * steps_per_epoch), held at min_lr after T.
//
// Linear warm-up composes with every type by multiplication: lr = main(step) * w(step), with
// w = start + (1 - start) * step / W for step < W, else 1 (LinearLR(start_factor, 1.0, W) per
// iteration), W = warmup_steps, or warmup_epochs * steps_per_epoch rounded. For constant, step and
// multistep this equals torch's ChainedScheduler([LinearLR, main]); for cosine it is the product of
// the two closed forms. Milestones and the cosine period stay counted from step 0, whatever the
// warm-up length; poly's decay starts where the warm-up ends.
//
// poly is MLPerf's ResNet-50 LARS schedule (mlcommons/training, image_classification/tensorflow2/
// lars_util.py, PolynomialDecayWithWarmup: power 2, end_learning_rate 0.0001, the warm-up
// base * step / W, i.e. warmup_start_factor 0): lr(W) = base on both sides of the joint. One
// difference: the reference decays over train_steps - W + 1 steps (its last step stays a little above
// end_lr); here T = train_steps - W.
// Tests: tests/optim/lr_schedule_test.cpp, lars_test.cpp (the ImageNet recipe's schedule).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/json_reader.h"

namespace kiln {

// What a schedule needs to know about the run.
struct ScheduleContext {
  double base_lr = 0.1;         // the optimizer's lr
  int64_t steps_per_epoch = 1;  // iterations per epoch
  int64_t epochs = 1;           // epochs of the whole run
};

// Linear warm-up; its fields sit in the schedule's own JSON object, beside the type's fields.
struct WarmupOptions {
  /// warm-up length in epochs, fractions allowed; 0 = no warm-up (default 0)
  double warmup_epochs = 0;
  /// warm-up length in iterations, instead of warmup_epochs; 0 = not used (default 0)
  int64_t warmup_steps = 0;
  /// lr factor at step 0, rising linearly to 1 at the end of the warm-up (default 0.1)
  double warmup_start_factor = 0.1;

  void read(JsonReader& r);
  void write(json& j) const;
  // W in iterations.
  int64_t length(const ScheduleContext& c) const;
};

struct ConstantLROptions : WarmupOptions {
  static ConstantLROptions from_json(const json& j, const std::string& path = "schedule");
  json to_json() const;  // every field, plus "name": "constant"
};

struct StepLROptions : WarmupOptions {
  /// epochs between two decays (default 30)
  int64_t step_size = 30;
  /// factor applied at each decay (default 0.1)
  double gamma = 0.1;
  static StepLROptions from_json(const json& j, const std::string& path = "schedule");
  json to_json() const;
};

struct MultiStepLROptions : WarmupOptions {
  /// epochs at which the lr is multiplied by gamma, increasing (default [30, 60, 90])
  std::vector<int64_t> milestones = {30, 60, 90};
  /// factor applied at each milestone (default 0.1)
  double gamma = 0.1;
  static MultiStepLROptions from_json(const json& j, const std::string& path = "schedule");
  json to_json() const;
};

struct CosineLROptions : WarmupOptions {
  /// lr reached at the end of the run (default 0)
  double min_lr = 0.0;
  static CosineLROptions from_json(const json& j, const std::string& path = "schedule");
  json to_json() const;
};

struct PolyLROptions : WarmupOptions {
  /// exponent of the decay (default 2, MLPerf's)
  double power = 2.0;
  /// lr reached at the end of the run, <= the optimizer's lr (default 0.0001, MLPerf's)
  double end_lr = 0.0001;
  static PolyLROptions from_json(const json& j, const std::string& path = "schedule");
  json to_json() const;
};

class LrSchedule {
 public:
  LrSchedule(const ScheduleContext& context, const WarmupOptions& warmup);
  virtual ~LrSchedule() = default;

  // The learning rate of global iteration `step` (0 for the first iteration of the run).
  double lr_at(int64_t step) const;
  // The warm-up factor alone (1 after the warm-up).
  double warmup_factor(int64_t step) const;
  const ScheduleContext& context() const { return context_; }
  // The options as JSON, with "name": make_schedule(s.to_json(), context) builds an equal one.
  virtual json to_json() const = 0;

 protected:
  // The schedule without warm-up.
  virtual double main_lr(int64_t step) const = 0;
  int64_t epoch_of(int64_t step) const { return step / context_.steps_per_epoch; }

  ScheduleContext context_;
  WarmupOptions warmup_;
  int64_t warmup_length_;
};

class ConstantLR : public LrSchedule {
 public:
  ConstantLR(const ScheduleContext& c, ConstantLROptions o = {}) : LrSchedule(c, o), options_(o) {}
  json to_json() const override { return options_.to_json(); }

 protected:
  double main_lr(int64_t) const override { return context_.base_lr; }

 private:
  ConstantLROptions options_;
};

class StepLR : public LrSchedule {
 public:
  StepLR(const ScheduleContext& c, StepLROptions o = {});
  json to_json() const override { return options_.to_json(); }

 protected:
  double main_lr(int64_t step) const override;

 private:
  StepLROptions options_;
};

class MultiStepLR : public LrSchedule {
 public:
  MultiStepLR(const ScheduleContext& c, MultiStepLROptions o = {});
  json to_json() const override { return options_.to_json(); }

 protected:
  double main_lr(int64_t step) const override;

 private:
  MultiStepLROptions options_;
};

class CosineLR : public LrSchedule {
 public:
  CosineLR(const ScheduleContext& c, CosineLROptions o = {});
  json to_json() const override { return options_.to_json(); }

 protected:
  double main_lr(int64_t step) const override;

 private:
  CosineLROptions options_;
};

class PolyLR : public LrSchedule {
 public:
  PolyLR(const ScheduleContext& c, PolyLROptions o = {});
  json to_json() const override { return options_.to_json(); }

 protected:
  double main_lr(int64_t step) const override;

 private:
  PolyLROptions options_;
};

// Builds the schedule named by j["name"] ("constant", "step", "multistep", "cosine", "poly"); `path` is
// the JSON path of `j`. Unknown names and keys are errors naming the path and what is accepted.
std::unique_ptr<LrSchedule> make_schedule(const json& j, const ScheduleContext& context,
                                          const std::string& path = "schedule");
std::vector<std::string> schedule_names();

}  // namespace kiln
