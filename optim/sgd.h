// Stochastic gradient descent with momentum, exactly torch.optim.SGD's rule (weight decay coupled:
// added to the gradient before momentum):
//
//   d = g + weight_decay * p
//   buf = d                                   (first step)
//   buf = momentum * buf + (1 - dampening) * d (later steps)
//   d = nesterov ? d + momentum * buf : buf    (when momentum != 0)
//   p = p - lr * d
//
// State: "<param>.momentum_buffer" per parameter once it has had a gradient.
// Tests: tests/optim/sgd_test.cpp; the direct form (model->parameters()): tests/optim/direct_params_test.cpp.
#pragma once
#include "optim/optimizer.h"

namespace kiln {

struct SGDOptions {
  /// learning rate before any schedule (default 0.1)
  double lr = 0.1;
  /// momentum factor; 0 turns momentum off (default 0.9)
  double momentum = 0.9;
  /// dampening of the gradient added to the momentum buffer (default 0)
  double dampening = 0.0;
  /// Nesterov momentum; needs momentum > 0 and dampening 0 (default false)
  bool nesterov = false;
  /// L2 penalty added to the gradient, as torch.optim.SGD (default 0)
  double weight_decay = 0.0;
  /// no weight decay for parameters marked no_decay: biases and batch-norm weights (default false)
  bool no_decay_bn_bias = false;

  // Reads the fields present in `j` (a "name" key is allowed); `path` names `j` in errors.
  static SGDOptions from_json(const json& j, const std::string& path = "optim");
  json to_json() const;  // every field, plus "name": "sgd"
  void validate(const std::string& path) const;
};

class SGD : public Optimizer {
 public:
  // The engine's form: the caller names the parameters and marks no_decay (mark_no_decay_1d).
  SGD(std::vector<ParamRef> params, SGDOptions options = {});
  // Directly from a model (param_refs, optim/param.h): `SGD opt(model->parameters(), {.lr = 0.05})`,
  // or model->named_parameters() to key the state and the errors by the model's names.
  SGD(const std::vector<Tensor>& params, SGDOptions options = {});
  SGD(const std::vector<std::pair<std::string, Tensor>>& named_params, SGDOptions options = {});
  void step() override;
  bool can_skip_on_device() const override { return true; }
  void step_unless(const Tensor& skip) override;
  std::string capture_refusal() const override { return ""; }  // the lr is read on the device
  uint64_t capture_identity() const override;
  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;
  json to_json() const override { return with_lr_mult(options_.to_json()); }
  int state_slots() const override { return options_.momentum > 0 ? 1 : 0; }
  const SGDOptions& options() const { return options_; }

 private:
  void run(const Tensor& skip);
  SGDOptions options_;
  std::vector<Tensor> momentum_;  // per parameter; undefined until its first step
};

}  // namespace kiln
