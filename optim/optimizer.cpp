// Optimizer base: learning rate and the checks shared by every optimizer's load_state_dict.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

namespace kiln {

Optimizer::Optimizer(std::string type, std::vector<ParamRef> params, double lr)
    : params_(std::move(params)), type_(std::move(type)), lr_(0) {
  check_params(params_, type_.c_str());
  set_lr(lr);
}

void Optimizer::set_lr(double lr) {
  KILN_CHECK(std::isfinite(lr) && lr >= 0, type_, ": learning rate must be finite and >= 0, got ", lr);
  lr_ = lr;
}

void Optimizer::set_lr_mult(const std::map<std::string, double>& mult, const std::string& path) {
  // "layer1" covers "layer1" and "layer1.0.conv1.weight", not "layer10.weight" (as freeze() in layers/module.h).
  auto covers = [](const std::string& prefix, const std::string& name) {
    return name.compare(0, prefix.size(), prefix) == 0 && (name.size() == prefix.size() || name[prefix.size()] == '.');
  };
  for (const auto& entry : mult) {
    // (not a structured binding: clang before 16 cannot capture one in a lambda)
    const std::string& prefix = entry.first;
    const double m = entry.second;
    KILN_CHECK(std::isfinite(m) && m >= 0, path, ".\"", prefix, "\" = ", m, " is not accepted; accepted: a factor >= 0");
    bool used = std::any_of(params_.begin(), params_.end(), [&](const ParamRef& p) { return covers(prefix, p.name); });
    if (used) continue;
    std::vector<std::string> tops;  // the first parts of the names, which is what a prefix usually is
    for (const ParamRef& p : params_) {
      std::string top = p.name.substr(0, p.name.find('.'));
      if (std::find(tops.begin(), tops.end(), top) == tops.end()) tops.push_back(top);
    }
    KILN_FAIL(path, ".\"", prefix, "\" matches no parameter that ", type_, " updates (frozen ones, train.freeze, are not "
              "among them); accepted: a dotted prefix of the parameter names, e.g. ", tops.empty() ? "none" : join(tops));
  }
  for (ParamRef& p : params_) {
    size_t best = 0;
    p.lr_mult = 1.0;
    for (const auto& [prefix, m] : mult)
      if (covers(prefix, p.name) && prefix.size() >= best) {
        best = prefix.size();
        p.lr_mult = m;
      }
  }
  lr_mult_ = mult;
}

double Optimizer::state_bytes() const {
  double elements = 0;
  for (const ParamRef& p : params_) elements += static_cast<double>(p.param.numel());
  return elements * 4.0 * state_slots();  // f32
}

json Optimizer::with_lr_mult(json j) const {
  if (!lr_mult_.empty()) j["lr_mult"] = lr_mult_;
  return j;
}

namespace {

// "conv.weight.exp_avg" -> ("conv.weight", "exp_avg"), the slot being the part after the last dot.
template <typename V>
std::vector<std::map<std::string, V>> split_by_param(const std::string& type, const std::vector<ParamRef>& params,
                                                      const std::map<std::string, V>& entries,
                                                      const std::vector<std::string>& slots, const char* kind) {
  std::unordered_map<std::string, size_t> index;
  std::vector<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    index[params[i].name] = i;
    names.push_back(params[i].name);
  }
  std::vector<std::map<std::string, V>> out(params.size());
  for (const auto& [key, value] : entries) {
    size_t dot = key.rfind('.');
    std::string pname = dot == std::string::npos ? "" : key.substr(0, dot);
    std::string slot = dot == std::string::npos ? key : key.substr(dot + 1);
    KILN_CHECK(std::find(slots.begin(), slots.end(), slot) != slots.end(), type, " load_state_dict: ", kind, " '", key,
               "' has no slot this optimizer keeps; accepted: <parameter>.{", join(slots, ","), "}");
    auto it = index.find(pname);
    if (it == index.end()) {
      std::string near = closest_match(pname, names);
      KILN_FAIL(type, " load_state_dict: ", kind, " '", key, "' names no parameter of this optimizer (",
                params.size(), " parameters", near.empty() ? "" : ", closest '" + near + "'",
                "); was the state saved for another model?");
    }
    out[it->second][slot] = value;
  }
  return out;
}

}  // namespace

void Optimizer::check_type(const OptimizerState& state) const {
  KILN_CHECK(state.type == type_, "load_state_dict: the state is for optimizer '", state.type, "', this optimizer is '",
             type_, "'");
}

std::vector<std::map<std::string, Tensor>> Optimizer::split_tensors(const OptimizerState& state,
                                                                    const std::vector<std::string>& slots) const {
  check_type(state);
  auto out = split_by_param(type_, params_, state.tensors, slots, "tensor");
  for (size_t i = 0; i < out.size(); ++i) {
    for (const auto& [slot, t] : out[i]) {
      std::string key = params_[i].name + "." + slot;
      KILN_CHECK(t.defined(), type_, " load_state_dict: tensor '", key, "' is undefined");
      KILN_CHECK(t.shape() == params_[i].param.shape(), type_, " load_state_dict: tensor '", key, "' is ", t.str(),
                 " but parameter '", params_[i].name, "' is ", params_[i].param.str());
      KILN_CHECK(t.dtype() == DType::f32, type_, " load_state_dict: tensor '", key, "' is ", t.str(), "; expected f32");
    }
  }
  return out;
}

std::vector<std::map<std::string, double>> Optimizer::split_scalars(const OptimizerState& state,
                                                                    const std::vector<std::string>& slots) const {
  check_type(state);
  return split_by_param(type_, params_, state.scalars, slots, "scalar");
}

OptimizerState Optimizer::per_param_state(const std::vector<Tensor>& tensors, const std::string& slot) const {
  OptimizerState s;
  s.type = type_;
  for (size_t k = 0; k < params_.size(); ++k)
    if (tensors[k].defined()) s.tensors[params_[k].name + "." + slot] = host_copy(tensors[k]);
  return s;
}

void Optimizer::load_per_param_state(const OptimizerState& state, const std::string& slot,
                                     std::vector<Tensor>& tensors) const {
  auto split = split_tensors(state, {slot});
  split_scalars(state, {});
  for (size_t k = 0; k < params_.size(); ++k) {
    auto it = split[k].find(slot);
    tensors[k] = it == split[k].end() ? Tensor() : device_copy(it->second);
  }
}

std::string Optimizer::capture_refusal() const {
  return type_ + "'s kernels take per-step host values as arguments (the learning rate)";
}

void Optimizer::write_step_values() {
  const Device d = device();
  if (d.is_cpu()) return;  // the CPU kernels take the host's value
  if (!lr_device_.defined() || lr_device_.device() != d) lr_device_ = Tensor::zeros({}, DType::f64, d);
  lr_device_.fill_(lr_);  // a kernel with the value as its argument, queued: no host wait
}

uint64_t Optimizer::mix(uint64_t h, uint64_t v) {
  // FNV-1a over the 8 bytes of v
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t Optimizer::mix(uint64_t h, const Tensor& t) {
  return mix(h, t.defined() ? static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.raw_data())) : 0);
}

uint64_t Optimizer::capture_identity() const {
  uint64_t h = 1469598103934665603ull;
  h = mix(h, lr_device_);
  for (const ParamRef& p : params_) {
    h = mix(h, p.param);
    uint64_t bits = 0;
    static_assert(sizeof(bits) == sizeof(p.lr_mult), "lr_mult is a double");
    std::memcpy(&bits, &p.lr_mult, sizeof(bits));
    h = mix(h, bits);
  }
  return h;
}

void Optimizer::step_unless(const Tensor&) {
  KILN_FAIL(type_, ": the step cannot be skipped on the device (its state counts steps on the host); read the "
            "flag and call step()");
}

}  // namespace kiln
