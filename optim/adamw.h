// AdamW (Loshchilov & Hutter), exactly torch.optim.AdamW's rule with decoupled weight decay:
//
//   t = t + 1                                        (per parameter)
//   p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   vmax = max(vmax, v)                               (amsgrad only; then vmax replaces v below)
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// State per parameter once it has had a gradient: "<param>.exp_avg", "<param>.exp_avg_sq",
// ("<param>.max_exp_avg_sq" with amsgrad) and the scalar "<param>.step".
// Tests: tests/optim/adamw_test.cpp; the direct form (model->parameters()): tests/optim/direct_params_test.cpp.
#pragma once
#include <array>

#include "optim/optimizer.h"

namespace kiln {

struct AdamWOptions {
  /// learning rate before any schedule (default 0.001)
  double lr = 1e-3;
  /// decay rates of the first and second moment averages, [beta1, beta2] (default [0.9, 0.999])
  std::array<double, 2> betas = {0.9, 0.999};
  /// added to the denominator for numerical stability (default 1e-8)
  double eps = 1e-8;
  /// decoupled weight decay: p *= 1 - lr * weight_decay each step (default 0.01)
  double weight_decay = 1e-2;
  /// use the maximum of past second moments (AMSGrad) (default false)
  bool amsgrad = false;
  /// no weight decay for parameters marked no_decay: biases and batch-norm weights (default false)
  bool no_decay_bn_bias = false;

  // Reads the fields present in `j` (a "name" key is allowed); `path` names `j` in errors.
  static AdamWOptions from_json(const json& j, const std::string& path = "optim");
  json to_json() const;  // every field, plus "name": "adamw"
  void validate(const std::string& path) const;
};

class AdamW : public Optimizer {
 public:
  // The engine's form: the caller names the parameters and marks no_decay (mark_no_decay_1d).
  AdamW(std::vector<ParamRef> params, AdamWOptions options = {});
  // Directly from a model (param_refs, optim/param.h): `AdamW opt(model->parameters(), {.lr = 0.05})`,
  // or model->named_parameters() to key the state and the errors by the model's names.
  AdamW(const std::vector<Tensor>& params, AdamWOptions options = {});
  AdamW(const std::vector<std::pair<std::string, Tensor>>& named_params, AdamWOptions options = {});
  void step() override;
  std::string capture_refusal() const override { return ""; }  // per-step values on the device
  // On a GPU: row k of an f32 (P, 3) device tensor gets parameter k's float(1 - lr*wd),
  // float(lr/(1 - beta1^t)), float(sqrt(1 - beta2^t)) for its next step t = step + 1, computed on the
  // host in double exactly as the kernel's arguments were, written as kernel arguments (no wait).
  void write_step_values() override;
  // The parameters that stepped in the captured step take one more step on the host's count
  // (after each replay, the capturing one included: a capture itself counts nothing).
  void note_replayed_step() override;
  uint64_t capture_identity() const override;
  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;
  json to_json() const override { return with_lr_mult(options_.to_json()); }
  int state_slots() const override { return options_.amsgrad ? 3 : 2; }
  const AdamWOptions& options() const { return options_; }

 private:
  struct Slot {
    int64_t step = 0;
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;  // undefined until the first step
  };
  bool step_values_written() const override { return values_.defined(); }
  AdamWOptions options_;
  std::vector<Slot> state_;
  Tensor values_;                  // f32 (P, 3) on a GPU: write_step_values()
  std::vector<size_t> captured_;   // the parameters the captured step updated (note_replayed_step)
};

}  // namespace kiln
