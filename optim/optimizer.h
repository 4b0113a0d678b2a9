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
// On a GPU, SGD and LARS read it through a pointer: each step first writes lr() into a f64 [] tensor
// on the parameters' device (write_step_values(), a queued fill: no host wait), and the kernels read
// it there (AdamW: its per-parameter values, adamw.h), so that the step can be captured in a CUDA
// graph and replayed with each step's values (tools/engine/cuda_graph.h). Eager steps use the same
// kernels and the same device values. On the CPU the kernels take the host's values and
// write_step_values() does nothing.
// Tests: tests/optim/sgd_test.cpp, adamw_test.cpp, lars_test.cpp, factory_test.cpp; lr_mult: tests/engine/finetune_test.cpp.
#pragma once
#include <cstdint>
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

  // --- the step inside a CUDA graph (tools/engine/cuda_graph.h, docs/cuda_backend.md "CUDA graphs") ---
  // Why this optimizer's step cannot be captured (its kernels take per-step host values), or ""
  // when every value that changes per step is read on the device (SGD, LARS: the learning rate,
  // device_lr(); AdamW: its per-step values, AdamW::write_step_values).
  virtual std::string capture_refusal() const;
  // Writes the per-step values (the learning rate; AdamW's decay factor, step size and bias
  // correction per parameter) to the device now, queued on the parameters' device, without a host
  // wait; nothing on the CPU. step() does it itself unless values_written_outside.
  virtual void write_step_values();
  // A replay of a graph that holds this optimizer's step ran it once more, without step(): the
  // host's own counts (AdamW's step per parameter) advance as the captured step's did.
  virtual void note_replayed_step() {}
  // While true, step()/step_unless() do not write the per-step values: a graph is being captured,
  // and the caller writes them before each launch instead (a write inside the capture would be
  // frozen with the capture's value).
  void set_values_written_outside(bool on) { values_outside_ = on; }
  // What a captured step freezes of this optimizer besides the gradients: the addresses of its
  // state tensors and of the device scalars, and each parameter's lr_mult, as one hash (a
  // load_state_dict() or set_lr_mult() changes it, and the graph is captured again).
  virtual uint64_t capture_identity() const;
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
  // Whether a graph is being captured (set_values_written_outside): a step then must not create
  // state (its allocation would belong to the capture) nor read anything back.
  bool values_written_outside() const { return values_outside_; }
  // The learning rate on the device (f64 [], written by write_step_values()), or undefined on the CPU.
  const Tensor& device_lr() const { return lr_device_; }
  // step()'s start: write_step_values() unless the caller writes them (set_values_written_outside).
  void before_step() {
    if (!values_outside_) write_step_values();
    else
      KILN_CHECK(device().is_cpu() || step_values_written(), type_, ": a captured step needs its per-step values on ",
                 "the device: call write_step_values() before the capture");
  }
  // Whether write_step_values() has made the device tensors the kernels read.
  virtual bool step_values_written() const { return lr_device_.defined(); }
  // Mixes the address of t (0 when undefined) into a capture_identity() hash.
  static uint64_t mix(uint64_t h, const Tensor& t);
  static uint64_t mix(uint64_t h, uint64_t v);
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
  Tensor lr_device_;            // f64 [] on a GPU once a step wrote it
  bool values_outside_ = false;
};

// Builds the optimizer named by j["name"] ("sgd", "adamw", "lars"); `path` is the JSON path of `j` for
// messages. Unknown names and keys are errors naming the path and what is accepted.
std::unique_ptr<Optimizer> make_optimizer(const json& j, std::vector<ParamRef> params, const std::string& path = "optim");
std::vector<std::string> optimizer_names();

}  // namespace kiln
