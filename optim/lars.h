// LARS: layer-wise adaptive rate scaling (You, Gitman, Ginsburg, "Large Batch Training of
// Convolutional Networks", arXiv:1708.03888) as MLPerf's ResNet-50 reference applies it
// (mlcommons/training, image_classification/tensorflow2/lars_optimizer.py, LARSOptimizer.compute_lr
// and _resource_apply_dense): SGD with momentum whose step for each weight tensor is scaled by
//
//   trust = eta * ||w|| / (||g|| + weight_decay * ||w|| + epsilon)   (1 when ||w|| or ||g|| is 0)
//   d     = g + weight_decay * w                                      (decay added before the momentum)
//   buf   = momentum * buf + lr * trust * d                           (buf starts at 0; lr inside it)
//   w     = w - (nesterov ? momentum * buf + lr * trust * d : buf)
//
// with ||g|| the norm of the raw gradient (before the decay term). The excluded parameters (the
// reference's skip_list ["batch_normalization", "bias"]) take the same momentum step with trust = 1
// and no weight decay. Here the exclusion is by kind, "exclude": ["bias", "bn"] by default:
//   "bias"  every parameter whose name ends in "bias" after its last dot ("fc.bias", "layer1.0.bn1.bias")
//   "bn"    the parameters of normalisation layers: 1-D tensors whose layer's "weight" is 1-D too
//           (batch-norm scale and shift: "bn1.weight", "bn1.bias")
// "exclude": [] applies LARS to every tensor. Per-part learning rates ("lr_mult") scale lr.
// NOTE: with lr inside the buffer (as the reference, unlike torch.optim.SGD) a schedule's change of lr
// does not rescale the momentum already accumulated; with a constant lr the two forms are equal.
// NOTE: the reference's epsilon flag is 0 (lars_epsilon=0 in its README), which its Keras base turns
// into 1e-7 (`epsilon or backend_config.epsilon()`); here 0 means 0 (the zero-norm cases are covered
// by trust = 1).
// State: "<param>.momentum_buffer" per parameter once it has had a gradient.
// Kernels: core/cpu/lars.cpp, core/cuda/optim_cuda.cu (norms and trust ratios on the GPU, nothing read
// back). Tests: tests/optim/lars_test.cpp, tests/gpu/lars_test.cpp; the direct form (model->parameters()):
// tests/optim/direct_params_test.cpp.
#pragma once
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace kiln {

struct LARSOptions {
  /// learning rate before any schedule (default 0.1)
  double lr = 0.1;
  /// momentum factor, in [0, 1) (default 0.9)
  double momentum = 0.9;
  /// L2 penalty added to the gradient of the adapted tensors; none on the excluded ones (default 0)
  double weight_decay = 0.0;
  /// trust coefficient eta, > 0 (default 0.001, MLPerf's)
  double eta = 0.001;
  /// added to the trust ratio's denominator (default 0)
  double epsilon = 0.0;
  /// Nesterov momentum (default false)
  bool nesterov = false;
  /// parameter kinds that take plain momentum SGD without decay: "bias", "bn" (default ["bias", "bn"])
  std::vector<std::string> exclude = {"bias", "bn"};

  // Reads the fields present in `j` (a "name" key is allowed); `path` names `j` in errors.
  static LARSOptions from_json(const json& j, const std::string& path = "optim");
  json to_json() const;  // every field, plus "name": "lars"
  void validate(const std::string& path) const;
};

// Which of `params` the exclusion rule `exclude` (kinds as above) leaves without LARS: one flag per
// parameter, in order. Needs the whole list: "bn" looks at the layer's weight.
std::vector<bool> lars_excluded(const std::vector<ParamRef>& params, const std::vector<std::string>& exclude);

class LARS : public Optimizer {
 public:
  // The engine's form: the caller names the parameters and marks no_decay (mark_no_decay_1d).
  LARS(std::vector<ParamRef> params, LARSOptions options = {});
  // Directly from a model (param_refs, optim/param.h): `LARS opt(model->parameters(), {.lr = 0.05})`,
  // or model->named_parameters() to key the state and the errors by the model's names.
  // NOTE: `exclude` finds biases and normalisation layers by name, so plain tensors need exclude = {}
  // (else the constructor says so); pass named_parameters() to keep the default ["bias", "bn"].
  LARS(const std::vector<Tensor>& params, LARSOptions options = {});
  LARS(const std::vector<std::pair<std::string, Tensor>>& named_params, LARSOptions options = {});
  void step() override { run(Tensor()); }
  // The buffers start at zero, so no step needs the host's knowledge of the outcome.
  bool can_skip_on_device() const override { return true; }
  void step_unless(const Tensor& skip) override;
  std::string capture_refusal() const override { return ""; }  // the lr is read on the device
  uint64_t capture_identity() const override;
  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;
  json to_json() const override { return with_lr_mult(options_.to_json()); }
  int state_slots() const override { return 1; }
  const LARSOptions& options() const { return options_; }
  // Per parameter: true when the exclusion rule leaves it without LARS.
  const std::vector<bool>& excluded() const { return excluded_; }

 private:
  void run(const Tensor& skip);
  LARSOptions options_;
  std::vector<bool> excluded_;
  std::vector<Tensor> momentum_;  // per parameter; undefined until its first step
};

}  // namespace kiln
