// AdamW: the options, the state, and the step, which builds one entry per parameter with a gradient
// and hands them to the device's fused step (core/optim_kernels.h: core/cpu/adamw.cpp,
// core/cuda/optim_cuda.cu).
#include "optim/adamw.h"

#include <cmath>

#include "core/optim_kernels.h"

namespace kiln {


AdamWOptions AdamWOptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  r.allow("lr_mult");  // every optimizer's, read by make_optimizer (optim/registry.cpp)
  AdamWOptions o;
  o.lr = r.get("lr", o.lr, 0.0, 1e6);
  std::vector<double> betas = r.get_numbers("betas", {o.betas[0], o.betas[1]});
  KILN_CHECK(betas.size() == 2, "config: ", r.path_of("betas"), " must be [beta1, beta2], got ", betas.size(), " numbers");
  o.betas = {betas[0], betas[1]};
  o.eps = r.get("eps", o.eps, 0.0, 1.0);
  o.weight_decay = r.get("weight_decay", o.weight_decay, 0.0, 1e6);
  o.amsgrad = r.get("amsgrad", o.amsgrad);
  o.no_decay_bn_bias = r.get("no_decay_bn_bias", o.no_decay_bn_bias);
  r.finish();
  o.validate(path);
  return o;
}

json AdamWOptions::to_json() const {
  return {{"name", "adamw"},
          {"lr", lr},
          {"betas", {betas[0], betas[1]}},
          {"eps", eps},
          {"weight_decay", weight_decay},
          {"amsgrad", amsgrad},
          {"no_decay_bn_bias", no_decay_bn_bias}};
}

void AdamWOptions::validate(const std::string& path) const {
  auto in = [&](const char* key) { return path.empty() ? std::string(key) : path + "." + key; };
  KILN_CHECK(lr >= 0, in("lr"), " = ", lr, " must be >= 0");
  for (int i = 0; i < 2; ++i)
    KILN_CHECK(betas[i] >= 0 && betas[i] < 1, in("betas"), "[", i, "] = ", betas[i], " must be in [0, 1)");
  KILN_CHECK(eps >= 0, in("eps"), " = ", eps, " must be >= 0");
  KILN_CHECK(weight_decay >= 0, in("weight_decay"), " = ", weight_decay, " must be >= 0");
}

AdamW::AdamW(std::vector<ParamRef> params, AdamWOptions options)
    : Optimizer("adamw", std::move(params), options.lr), options_(options) {
  options_.validate("adamw");
  state_.resize(params_.size());
}

AdamW::AdamW(const std::vector<Tensor>& params, AdamWOptions options) : AdamW(param_refs(params), options) {}
AdamW::AdamW(const std::vector<std::pair<std::string, Tensor>>& named_params, AdamWOptions options)
    : AdamW(param_refs(named_params), options) {}

namespace {

// The kernel's per-step values for a parameter's step t (core/optim_kernels.h), in double, then f32.
void step_values(double lr, double wd, int64_t t, double beta1, double beta2, float* out) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  out[0] = static_cast<float>(1.0 - lr * wd);
  out[1] = static_cast<float>(lr / bc1);
  out[2] = static_cast<float>(std::sqrt(bc2));
}

}  // namespace

void AdamW::write_step_values() {
  if (device().is_cpu()) return;  // the CPU kernel computes them from the entries
  const int64_t n = static_cast<int64_t>(params_.size());
  if (n == 0) return;
  std::vector<float> v(static_cast<size_t>(3 * n));
  for (size_t k = 0; k < params_.size(); ++k)
    step_values(this->lr() * params_[k].lr_mult, decay_for(k, options_.weight_decay, options_.no_decay_bn_bias),
                state_[k].step + 1, options_.betas[0], options_.betas[1], v.data() + 3 * k);
  if (!values_.defined() || values_.device() != device()) values_ = Tensor::empty({n, 3}, DType::f32, device());
  write_values_kernel.get(device(), "AdamW")(values_, v);  // as kernel arguments: queued, no wait
}

void AdamW::note_replayed_step() {
  for (size_t k : captured_) state_[k].step += 1;
}

uint64_t AdamW::capture_identity() const {
  uint64_t h = Optimizer::capture_identity();
  h = mix(h, values_);
  for (const Slot& s : state_) h = mix(mix(mix(h, s.exp_avg), s.exp_avg_sq), s.max_exp_avg_sq);
  return h;
}

void AdamW::step() {
  before_step();  // the per-step values to the device (a GPU), unless a graph's caller writes them
  if (values_written_outside()) captured_.clear();
  const double base_lr = this->lr();
  std::vector<AdamWStepEntry> entries;
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor grad = dense_grad(params_[k], "AdamW");
    if (!grad.defined()) continue;
    Slot& s = state_[k];
    KILN_CHECK(s.exp_avg.defined() || !values_written_outside(), "AdamW: the first step of '", params_[k].name,
               "' (its moments are made then) cannot be captured");
    if (values_written_outside()) captured_.push_back(k);
    if (!s.exp_avg.defined()) {
      const Shape& shape = params_[k].param.shape();
      s.exp_avg = Tensor::zeros(shape, DType::f32, device());
      s.exp_avg_sq = Tensor::zeros(shape, DType::f32, device());
      if (options_.amsgrad) s.max_exp_avg_sq = Tensor::zeros(shape, DType::f32, device());
    }
    // Inside a capture the host's count advances when the graph runs (note_replayed_step, after
    // each replay, the capturing one included): a capture that fails then leaves it as it was.
    const int64_t t = s.step + 1;
    if (!values_written_outside()) s.step = t;
    AdamWStepEntry e;
    e.param = params_[k].param;
    e.grad = grad;
    e.exp_avg = s.exp_avg;
    e.exp_avg_sq = s.exp_avg_sq;
    e.max_exp_avg_sq = s.max_exp_avg_sq;
    e.lr = base_lr * params_[k].lr_mult;
    e.weight_decay = decay_for(k, options_.weight_decay, options_.no_decay_bn_bias);
    e.step = t;
    e.row = static_cast<int64_t>(k);
    entries.push_back(e);
  }
  adamw_step_kernel.get(device(), "AdamW")(entries, {options_.betas[0], options_.betas[1], options_.eps, values_});
}

OptimizerState AdamW::state_dict() const {
  OptimizerState out;
  out.type = type();
  for (size_t k = 0; k < params_.size(); ++k) {
    const Slot& s = state_[k];
    if (!s.exp_avg.defined()) continue;
    const std::string& name = params_[k].name;
    out.tensors[name + ".exp_avg"] = host_copy(s.exp_avg);
    out.tensors[name + ".exp_avg_sq"] = host_copy(s.exp_avg_sq);
    if (s.max_exp_avg_sq.defined()) out.tensors[name + ".max_exp_avg_sq"] = host_copy(s.max_exp_avg_sq);
    out.scalars[name + ".step"] = static_cast<double>(s.step);
  }
  return out;
}

void AdamW::load_state_dict(const OptimizerState& state) {
  auto tensors = split_tensors(state, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"});
  auto scalars = split_scalars(state, {"step"});
  std::vector<Slot> next(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    const std::string& name = params_[k].name;
    auto& ts = tensors[k];
    bool any = !ts.empty() || scalars[k].count("step");
    if (!any) continue;
    for (const char* slot : {"exp_avg", "exp_avg_sq"})
      KILN_CHECK(ts.count(slot), "adamw load_state_dict: parameter '", name, "' has state but no '", name, ".", slot, "'");
    KILN_CHECK(scalars[k].count("step"), "adamw load_state_dict: parameter '", name, "' has moments but no '", name,
               ".step'");
    KILN_CHECK(!options_.amsgrad || ts.count("max_exp_avg_sq"), "adamw load_state_dict: amsgrad is on but '", name,
               ".max_exp_avg_sq' is missing (state saved without amsgrad?)");
    double step = scalars[k].at("step");
    KILN_CHECK(step >= 1 && step == std::floor(step) && step < 9.0e15, "adamw load_state_dict: '", name, ".step' = ", step,
               " is not a positive integer");
    next[k].step = static_cast<int64_t>(step);
    next[k].exp_avg = device_copy(ts.at("exp_avg"));
    next[k].exp_avg_sq = device_copy(ts.at("exp_avg_sq"));
    if (options_.amsgrad) next[k].max_exp_avg_sq = device_copy(ts.at("max_exp_avg_sq"));
  }
  state_ = std::move(next);
}

}  // namespace kiln
