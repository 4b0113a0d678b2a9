// LARS: the options, the exclusion rule, the state, and the step, which builds one entry per parameter
// with a gradient and hands them to the device's fused step (core/optim_kernels.h: core/cpu/lars.cpp;
// core/cuda/optim_cuda.cu, norms and trust ratios computed on the GPU).
#include "optim/lars.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/json_util.h"  // join
#include "core/optim_kernels.h"

namespace kiln {

namespace {

const std::vector<std::string> kExcludeKinds = {"bias", "bn"};

std::string in(const std::string& path, const char* key) { return path.empty() ? std::string(key) : path + "." + key; }

}  // namespace

LARSOptions LARSOptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  r.allow("lr_mult");  // every optimizer's, read by make_optimizer (optim/registry.cpp)
  LARSOptions o;
  o.lr = r.get("lr", o.lr, 0.0, 1e6);
  o.momentum = r.get("momentum", o.momentum, 0.0, 1.0);
  o.weight_decay = r.get("weight_decay", o.weight_decay, 0.0, 1e6);
  if (KeyRecorder* rec = KeyRecorder::current())  // > 0 (validate()), which get()'s closed range cannot say
    rec->note({r.path_of("eta"), "number", o.eta, true, false, "(0, 1e+06]"});
  o.eta = r.get("eta", o.eta, 0.0, 1e6);
  o.epsilon = r.get("epsilon", o.epsilon, 0.0, 1e6);
  o.nesterov = r.get("nesterov", o.nesterov);
  // A list of strings: read raw, checked here, noted with its type for `kiln config keys`.
  const json& ex = r.raw("exclude");
  if (KeyRecorder* rec = KeyRecorder::current())
    rec->note({r.path_of("exclude"), "list of strings", json(o.exclude), true, false, join(kExcludeKinds)});
  if (!ex.is_null()) {
    KILN_CHECK(ex.is_array(), "config: ", r.path_of("exclude"), " = ", ex.dump(),
               " is not accepted; accepted: a list of parameter kinds from ", join(kExcludeKinds), ", e.g. [\"bias\", \"bn\"]");
    o.exclude.clear();
    for (size_t i = 0; i < ex.size(); ++i) {
      KILN_CHECK(ex[i].is_string(), "config: ", r.path_of("exclude"), "[", i, "] = ", ex[i].dump(),
                 " is not accepted; accepted: one of ", join(kExcludeKinds));
      o.exclude.push_back(ex[i].get<std::string>());
    }
  }
  r.finish();
  o.validate(path);
  return o;
}

json LARSOptions::to_json() const {
  return {{"name", "lars"},       {"lr", lr},           {"momentum", momentum}, {"weight_decay", weight_decay},
          {"eta", eta},           {"epsilon", epsilon}, {"nesterov", nesterov}, {"exclude", exclude}};
}

void LARSOptions::validate(const std::string& path) const {
  KILN_CHECK(std::isfinite(lr) && lr >= 0, in(path, "lr"), " = ", lr, " is not accepted; accepted: >= 0");
  KILN_CHECK(momentum >= 0 && momentum < 1, in(path, "momentum"), " = ", momentum, " is not accepted; accepted: [0, 1)");
  KILN_CHECK(std::isfinite(weight_decay) && weight_decay >= 0, in(path, "weight_decay"), " = ", weight_decay,
             " is not accepted; accepted: >= 0");
  KILN_CHECK(std::isfinite(eta) && eta > 0, in(path, "eta"), " = ", eta,
             " is not accepted; accepted: > 0 (the trust coefficient, MLPerf's 0.001)");
  KILN_CHECK(std::isfinite(epsilon) && epsilon >= 0, in(path, "epsilon"), " = ", epsilon,
             " is not accepted; accepted: >= 0");
  for (size_t i = 0; i < exclude.size(); ++i) {
    const std::string& k = exclude[i];
    if (std::find(kExcludeKinds.begin(), kExcludeKinds.end(), k) != kExcludeKinds.end()) continue;
    const std::string near = closest_match(k, kExcludeKinds);
    KILN_FAIL(in(path, "exclude"), "[", i, "] = \"", k, "\" is not accepted", near.empty() ? "" : " (did you mean \"" + near + "\"?)",
              "; accepted: ", join(kExcludeKinds));
  }
}

std::vector<bool> lars_excluded(const std::vector<ParamRef>& params, const std::vector<std::string>& exclude) {
  auto has = [&](const char* kind) { return std::find(exclude.begin(), exclude.end(), kind) != exclude.end(); };
  const bool bias = has("bias"), bn = has("bn");
  // layer prefix ("layer1.0.bn1") -> its "weight" is 1-D
  std::map<std::string, bool> weight_1d;
  auto split = [](const std::string& name) {
    const size_t dot = name.rfind('.');
    return dot == std::string::npos ? std::make_pair(std::string(), name)
                                    : std::make_pair(name.substr(0, dot), name.substr(dot + 1));
  };
  for (const ParamRef& p : params) {
    auto [layer, leaf] = split(p.name);
    if (leaf == "weight") weight_1d[layer] = p.param.dim() == 1;
  }
  std::vector<bool> out;
  for (const ParamRef& p : params) {
    auto [layer, leaf] = split(p.name);
    const bool is_bias = leaf == "bias";
    auto it = weight_1d.find(layer);
    const bool is_norm = p.param.dim() == 1 && it != weight_1d.end() && it->second;
    out.push_back((bias && is_bias) || (bn && is_norm));
  }
  return out;
}

LARS::LARS(std::vector<ParamRef> params, LARSOptions options)
    : Optimizer("lars", std::move(params), options.lr), options_(std::move(options)) {
  options_.validate("lars");
  excluded_ = lars_excluded(params_, options_.exclude);
  momentum_.resize(params_.size());
}

namespace {
// Plain tensors have no names for `exclude` to go by: refuse rather than exclude nothing silently.
const LARSOptions& unnamed_options(const LARSOptions& o) {
  KILN_CHECK(o.exclude.empty(), "LARS: exclude = [", join(o.exclude), "] finds biases and normalisation layers by "
             "their names, and plain tensors (model->parameters()) have none; accepted: pass "
             "model->named_parameters(), or set exclude = {} to adapt every tensor");
  return o;
}
}  // namespace

LARS::LARS(const std::vector<Tensor>& params, LARSOptions options)
    : LARS(param_refs(params), unnamed_options(options)) {}
LARS::LARS(const std::vector<std::pair<std::string, Tensor>>& named_params, LARSOptions options)
    : LARS(param_refs(named_params), std::move(options)) {}

void LARS::step_unless(const Tensor& skip) {
  KILN_CHECK(skip.defined(), "LARS::step_unless: no flag given");
  run(skip);
}

uint64_t LARS::capture_identity() const {
  uint64_t h = Optimizer::capture_identity();
  for (const Tensor& m : momentum_) h = mix(h, m);
  return h;
}

void LARS::run(const Tensor& skip) {
  before_step();  // the learning rate to the device (a GPU), unless a graph's caller writes it
  std::vector<LarsStepEntry> entries;
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor grad = dense_grad(params_[k], "LARS");
    if (!grad.defined()) continue;
    // Zeros, not the first gradient: the first step is then the formula's own (buf = lr * trust * d)
    // and a skipped first step leaves them at zero without the host reading the flag.
    KILN_CHECK(momentum_[k].defined() || !values_written_outside(), "LARS: the first step of '", params_[k].name,
               "' (its momentum buffer is made then) cannot be captured");
    if (!momentum_[k].defined()) momentum_[k] = Tensor::zeros(params_[k].param.shape(), DType::f32, device());
    LarsStepEntry e;
    e.param = params_[k].param;
    e.grad = grad;
    e.momentum_buffer = momentum_[k];
    e.lr = this->lr() * params_[k].lr_mult;
    e.lr_mult = params_[k].lr_mult;
    e.adapt = !excluded_[k];
    e.weight_decay = e.adapt ? options_.weight_decay : 0.0;
    entries.push_back(e);
  }
  lars_step_kernel.get(device(), "LARS")(entries, {options_.momentum, options_.eta, options_.epsilon, options_.nesterov, skip, device_lr()});
}

OptimizerState LARS::state_dict() const { return per_param_state(momentum_, "momentum_buffer"); }

void LARS::load_state_dict(const OptimizerState& state) { load_per_param_state(state, "momentum_buffer", momentum_); }

}  // namespace kiln
