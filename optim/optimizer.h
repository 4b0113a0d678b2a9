// The optimizer interface, its checkpointable state, and the factory that builds one from the
// config's "optim" section:
//
//   "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-5}
//
// Every optimizer also takes "lr_mult": {"<prefix>": m, ...}: the parameters under a prefix (the
// dotted names, "layer1" covers "layer1.0.conv1.weight" but not "layer10.x") learn at lr * m (weight
// decay too, as a PyTorch param group with that lr); the longest matching prefix wins, the others
// learn at lr; m = 0 stops a part (but freezing, train.freeze, also saves its gradients). A prefix
// that covers no parameter of the optimizer is an error naming it (docs/finetune.md).
//
// Optimizers update f32 parameters in place (never recorded by autograd): on the CPU one fused loop
// per parameter, on a GPU one multi-tensor kernel launch for all of them (core/cuda/optim_cuda.cu).
// The state lives on the parameters' device. A parameter without .grad is left alone (its state does
// not advance), as in PyTorch.
// The learning rate starts at the options' lr; schedules overwrite it each iteration (set_lr).
// Tests: tests/optim/sgd_test.cpp, adamw_test.cpp, lars_test.cpp, factory_test.cpp; lr_mult: tests/engine/finetune_test.cpp.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "core/tensor.h"
#include "optim/param.h"

namespace kiln {

// What a checkpoint keeps of an optimizer. Tensor keys are "<parameter name>.<slot>"
// ("layer1.0.conv1.weight.momentum_buffer"), f32 CPU tensors shaped like the parameter; scalar
// keys likewise ("fc.weight.step"). Tensors go to safetensors, scalars to the training-state JSON.
struct OptimizerState {
  std::string type;                        // "sgd", "adamw", "lars": must match on load
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;
};

class Optimizer {
 public:
  Optimizer(std::string type, std::vector<ParamRef> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  // The same update unless `skip` (an i32 [] on the parameters' device: the fp16 loss scaler's
  // found_inf()) holds a nonzero value, decided on that device, so that a GPU step reads nothing
  // back. Offered where the host's own state does not depend on the outcome (SGD); AdamW counts its
  // steps on the host for the bias correction, so there the caller reads the flag and calls step().
  virtual bool can_skip_on_device() const { return false; }
  virtual void step_unless(const Tensor& skip);
  void zero_grad() { kiln::zero_grad(params_); }

  const std::string& type() const { return type_; }
  const std::vector<ParamRef>& params() const { return params_; }
  double lr() const { return lr_; }
  void set_lr(double lr);
  // Per-part learning rates (the "lr_mult" above): sets every parameter's ParamRef::lr_mult from
  // the longest prefix of `mult` that covers it (1 where none does). `path` names the option in
  // errors ("optim.lr_mult"). make_optimizer calls it; to_json() writes the map back.
  void set_lr_mult(const std::map<std::string, double>& mult, const std::string& path);
  const std::map<std::string, double>& lr_mult() const { return lr_mult_; }

  // Copies of the state on the CPU (safe to keep while training continues).
  virtual OptimizerState state_dict() const = 0;
  // Replaces the state. Checks everything before changing anything: the type, every key against the
  // parameter names and the slots this optimizer has, shapes and dtypes; errors name the key.
  virtual void load_state_dict(const OptimizerState& state) = 0;
  // The options as JSON, with "name": make_optimizer(opt.to_json(), params) builds an equal one.
  virtual json to_json() const = 0;
  // f32 state tensors the optimizer keeps per parameter once it has stepped (SGD: 1 with momentum,
  // else 0; AdamW: 2, 3 with amsgrad), and their bytes over every parameter: AutoBatch adds them to
  // what a step's probe measured, since the state is allocated at the first step.
  virtual int state_slots() const = 0;
  double state_bytes() const;

 protected:
  void check_type(const OptimizerState& state) const;
  // Groups state.tensors / state.scalars by parameter index, checking type, names, slots, shapes.
  // result[i] maps slot -> tensor for params_[i].
  std::vector<std::map<std::string, Tensor>> split_tensors(const OptimizerState& state,
                                                           const std::vector<std::string>& slots) const;
  std::vector<std::map<std::string, double>> split_scalars(const OptimizerState& state,
                                                           const std::vector<std::string>& slots) const;
  // The device of the parameters (all on one, checked by the constructor); CPU when there are none.
  Device device() const { return params_.empty() ? Device::cpu() : params_[0].param.device(); }
  // A copy of state tensor `t` on the CPU (state_dict) / on the parameters' device (load_state_dict).
  static Tensor host_copy(const Tensor& t) { return t.device().is_cpu() ? t.detach().clone() : t.detach().to(Device::cpu()); }
  Tensor device_copy(const Tensor& t) const {
    return t.device() == device() ? t.detach().clone() : t.detach().to(device());
  }
  // One state tensor per parameter (SGD's and LARS's momentum buffers) as "<param>.<slot>", the
  // undefined ones (no step yet) left out; and back, checked as split_tensors does.
  OptimizerState per_param_state(const std::vector<Tensor>& tensors, const std::string& slot) const;
  void load_per_param_state(const OptimizerState& state, const std::string& slot, std::vector<Tensor>& tensors) const;
  // Weight decay for parameter i: 0 when it is no_decay and `no_decay_bn_bias` is on.
  double decay_for(size_t i, double weight_decay, bool no_decay_bn_bias) const {
    return no_decay_bn_bias && params_[i].no_decay ? 0.0 : weight_decay;
  }

  // The options' JSON plus "lr_mult" when any is set (for the optimizers' to_json()).
  json with_lr_mult(json j) const;

  std::vector<ParamRef> params_;

 private:
  std::string type_;
  double lr_;
  std::map<std::string, double> lr_mult_;
};

// Builds the optimizer named by j["name"] ("sgd", "adamw", "lars"); `path` is the JSON path of `j` for
// messages. Unknown names and keys are errors naming the path and what is accepted.
std::unique_ptr<Optimizer> make_optimizer(const json& j, std::vector<ParamRef> params, const std::string& path = "optim");
std::vector<std::string> optimizer_names();

}  // namespace kiln
