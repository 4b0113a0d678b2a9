// SGD: the options, the state, and the step, which builds one entry per parameter with a gradient
// and hands them to the device's fused step (core/optim_kernels.h: core/cpu/sgd.cpp, one pass over each
// parameter; core/cuda/optim_cuda.cu, one multi-tensor launch).
#include "optim/sgd.h"

#include "core/optim_kernels.h"

namespace kiln {

SGDOptions SGDOptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  r.allow("lr_mult");  // every optimizer's, read by make_optimizer (optim/registry.cpp)
  SGDOptions o;
  o.lr = r.get("lr", o.lr, 0.0, 1e6);
  o.momentum = r.get("momentum", o.momentum, 0.0, 1.0);
  o.dampening = r.get("dampening", o.dampening, 0.0, 1.0);
  o.nesterov = r.get("nesterov", o.nesterov);
  o.weight_decay = r.get("weight_decay", o.weight_decay, 0.0, 1e6);
  o.no_decay_bn_bias = r.get("no_decay_bn_bias", o.no_decay_bn_bias);
  r.finish();
  o.validate(path);
  return o;
}

json SGDOptions::to_json() const {
  return {{"name", "sgd"},
          {"lr", lr},
          {"momentum", momentum},
          {"dampening", dampening},
          {"nesterov", nesterov},
          {"weight_decay", weight_decay},
          {"no_decay_bn_bias", no_decay_bn_bias}};
}

void SGDOptions::validate(const std::string& path) const {
  auto in = [&](const char* key) { return path.empty() ? std::string(key) : path + "." + key; };
  KILN_CHECK(lr >= 0, in("lr"), " = ", lr, " must be >= 0");
  KILN_CHECK(momentum >= 0 && momentum <= 1, in("momentum"), " = ", momentum, " must be in [0, 1]");
  KILN_CHECK(dampening >= 0 && dampening <= 1, in("dampening"), " = ", dampening, " must be in [0, 1]");
  KILN_CHECK(weight_decay >= 0, in("weight_decay"), " = ", weight_decay, " must be >= 0");
  KILN_CHECK(!nesterov || (momentum > 0 && dampening == 0), in("nesterov"),
             " = true needs momentum > 0 and dampening = 0 (momentum ", momentum, ", dampening ", dampening, ")");
}

SGD::SGD(std::vector<ParamRef> params, SGDOptions options)
    : Optimizer("sgd", std::move(params), options.lr), options_(options) {
  options_.validate("sgd");
  momentum_.resize(params_.size());
}

SGD::SGD(const std::vector<Tensor>& params, SGDOptions options) : SGD(param_refs(params), options) {}
SGD::SGD(const std::vector<std::pair<std::string, Tensor>>& named_params, SGDOptions options)
    : SGD(param_refs(named_params), options) {}


void SGD::step() { run(Tensor()); }

void SGD::step_unless(const Tensor& skip) {
  KILN_CHECK(skip.defined(), "SGD::step_unless: no flag given");
  // A momentum buffer is created by its parameter's first step (buf = grad there). Whether such a
  // step happens is read back here: one wait, in a run's first step; later steps leave it to the device.
  if (options_.momentum != 0)
    for (size_t k = 0; k < params_.size(); ++k)
      if (!momentum_[k].defined() && dense_grad(params_[k], "SGD").defined()) {
        KILN_CHECK(!values_written_outside(), "SGD: the first step of '", params_[k].name,
                   "' (its momentum buffer is made then, and the skip flag read) cannot be captured");
        if (skip.item() == 0) run(Tensor());
        return;
      }
  run(skip);
}

uint64_t SGD::capture_identity() const {
  uint64_t h = Optimizer::capture_identity();
  for (const Tensor& m : momentum_) h = mix(h, m);
  return h;
}

void SGD::run(const Tensor& skip) {
  before_step();  // the learning rate to the device (a GPU), unless a graph's caller writes it
  const bool momentum_on = options_.momentum != 0;
  std::vector<SgdStepEntry> entries;
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor grad = dense_grad(params_[k], "SGD");
    if (!grad.defined()) continue;
    SgdStepEntry e;
    e.param = params_[k].param;
    e.grad = grad;
    e.lr = this->lr() * params_[k].lr_mult;
    e.lr_mult = params_[k].lr_mult;
    e.weight_decay = decay_for(k, options_.weight_decay, options_.no_decay_bn_bias);
    if (momentum_on) {
      e.first_step = !momentum_[k].defined();
      KILN_CHECK(!e.first_step || !values_written_outside(), "SGD: the first step of '", params_[k].name,
                 "' (its momentum buffer is made then) cannot be captured");
      if (e.first_step) momentum_[k] = Tensor::empty(params_[k].param.shape(), DType::f32, device());
      e.momentum_buffer = momentum_[k];
    }
    entries.push_back(e);
  }
  sgd_step_kernel.get(device(), "SGD")(entries, {options_.momentum, options_.dampening, options_.nesterov, skip, device_lr()});
}

OptimizerState SGD::state_dict() const { return per_param_state(momentum_, "momentum_buffer"); }

void SGD::load_state_dict(const OptimizerState& state) { load_per_param_state(state, "momentum_buffer", momentum_); }

}  // namespace kiln
