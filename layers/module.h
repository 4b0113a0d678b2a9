// Module: the base of every layer and model. A module owns named parameters (trainable leaves) and
// buffers (running statistics), registered in order, and named child modules. Names compose with
// dots exactly as in torch.nn ("layer1.0.conv1.weight", "bn1.running_mean"), so a state dict moves
// between kiln and PyTorch by name (layers/interop.h converts the tensor layouts).
//
// Parameters and buffers are Tensor handles shared between the module's registry and the layer's
// own members; to(device) and load_state_dict() change them in place, so every handle (a layer's,
// an optimizer's) stays valid.
//
// A module's config (to_json()) is what rebuilds it through a registry: every built-in layer and
// model has one. A Module subclass written in code (a user's network, docs/library.md) needs none to
// train, save and load its weights; only what rebuilds a model from its description (a run's
// config.json, `kiln export`'s metadata, predicting from a run folder) asks for it, and then fails
// naming itself and the model (config_for()).
// Tests: tests/layers/module_test.cpp, tests/layers/code_model_test.cpp (a model built in code).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/json_reader.h"
#include "core/tensor.h"

namespace kiln {

using StateDict = std::map<std::string, Tensor>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Thrown by Module::to_json() of a module that has no config (built in code, to_json() not
// overridden); `module_type()` is that module's type, which may be a child of the model asked.
class NoConfigError : public Error {
 public:
  NoConfigError(const std::string& what, std::string module_type) : Error(what), type_(std::move(module_type)) {}
  const std::string& module_type() const { return type_; }

 private:
  std::string type_;
};

class Module {
 public:
  explicit Module(std::string type) : type_(std::move(type)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  // The registry name of a layer ("conv2d") or the model name ("resnet50").
  const std::string& type() const { return type_; }
  // The options that rebuild this module through its registry (layers/registry.h, models/registry.h).
  // Every built-in layer and model overrides it. The default is for modules built in code: it throws
  // NoConfigError naming this module's type, and says what to do (register it or override this).
  virtual json to_json() const;
  // to_json() for `feature`, the thing that needs the config ("the run's config.json", "kiln export"):
  // the same JSON, or, when this module or one inside it has none, an error that names the feature
  // and the module: "model 'MyNet' was built in code and has no config; kiln export needs one:
  // register it (docs/library.md) or override to_json()".
  json config_for(const std::string& feature) const;

  // --- parameters and buffers, recursively, in registration order (own first, then children) --
  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;  // elements of all parameters
  // Parameters and buffers by name; the tensors share storage with the module (detached handles).
  StateDict state_dict() const;
  // Copies every tensor of `sd` into the module (dtype converted, device kept). strict: a missing,
  // unexpected or wrongly shaped key is an error that lists all of them; not strict: missing and
  // unexpected keys are ignored (a wrong shape is still an error).
  void load_state_dict(const StateDict& sd, bool strict = true);

  // --- children --------------------------------------------------------------------------------
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // Every module of the tree with its dotted path, this one first as "".
  std::vector<std::pair<std::string, Module*>> named_modules();
  // The child at a dotted path ("layer1.0.conv1"); throws naming the path when there is none.
  Module& submodule(const std::string& path);

  // --- modes and devices -----------------------------------------------------------------------
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Frozen (fine-tuning, freeze() below): set on a module whose parameters are all frozen. Layers
  // with statistics (BatchNorm2d) then keep them as they are, in training mode too.
  bool is_frozen() const { return frozen_; }
  void set_frozen(bool on) { frozen_ = on; }
  // Moves every parameter, buffer and gradient to `device`, in place.
  void to(Device device);
  void zero_grad();

 protected:
  // Registers a trainable tensor (requires_grad is set); returns the same handle.
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;

  std::string type_;
  bool training_ = true;
  bool frozen_ = false;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// Checks that `given` has exactly the keys of `expected` with the expected shapes (a missing key is
// allowed only when !strict, an unexpected one likewise). Throws one error that lists every missing,
// unexpected and mismatched key. `what` names the caller ("load_state_dict").
void check_state_dict(const std::vector<std::pair<std::string, Shape>>& expected, const StateDict& given, bool strict,
                      const std::string& what);

// True when `name` is `prefix` or lies below it in the dotted names: "layer1" covers "layer1" and
// "layer1.0.conv1.weight", not "layer10.weight".
bool name_under(const std::string& name, const std::string& prefix);

// Freezes the parameters of `m` under any of `prefixes` (name_under; a prefix may be a module path
// "layer1", "features.0" or a parameter name "fc.bias"): they stop requiring grad (their .grad is
// dropped), so backward leaves them alone and an optimizer built from the parameters that still
// require grad never updates them. Every module whose parameters are then all frozen is marked
// frozen (BatchNorm2d keeps its running statistics, as torchvision's FrozenBatchNorm2d). `what`
// names the option in errors ("train.freeze"): an entry that covers no parameter is an error naming
// it. Returns the frozen parameters' names, in order.
std::vector<std::string> freeze(Module& m, const std::vector<std::string>& prefixes, const std::string& what);

// Mixed precision: the parameter as the layer computes with it for input `x`. When `x` is f16 or
// bf16 and the parameter is f32 (the master copy), a recorded cast to x's dtype (its gradient flows
// back to the f32 parameter in f32); otherwise the parameter itself. Conv2d and Linear call it once
// per forward, so each weight is cast once per step (twice for a checkpointed segment, which
// recomputes). An undefined tensor (no bias) stays undefined.
Tensor param_for_input(const Tensor& param, const Tensor& x);

// Gradient checkpointing re-runs a segment's forward in backward. Layers with side effects in
// forward (batch-norm running statistics) ask is_recomputing() so a recomputation does not apply
// them a second time. RecomputeScope marks the current thread while a segment is re-run.
bool is_recomputing();
class RecomputeScope {
 public:
  explicit RecomputeScope(bool on);
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln
