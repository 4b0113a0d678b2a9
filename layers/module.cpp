#include "layers/module.h"

#include <algorithm>

#include "core/autograd.h"

namespace kiln {

namespace {
// Replaces the storage of the tensor behind `t` by a copy on `device`, keeping the handle (and so
// every other handle to it) valid.
void move_in_place(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return;
  Tensor moved = t.detach().to(device);
  TensorImpl& impl = t.impl();
  impl.storage = moved.impl().storage;
  impl.strides = moved.strides();
  impl.offset = moved.offset();
  if (impl.grad) impl.grad = Tensor(impl.grad).detach().to(device).impl_ptr();
}

std::string list_some(const std::vector<std::string>& v, size_t most = 12) {
  std::vector<std::string> head(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), most)));
  std::string s = join(head);
  if (v.size() > most) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

thread_local bool t_recomputing = false;
}  // namespace

// ---------------------------------------------------------------------------------------------
// Registration
void Module::check_new_name(const std::string& name) const {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos, type_, ": invalid member name '", name,
             "' (names are non-empty and contain no dot)");
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& kv) { return kv.first == name; });
  };
  KILN_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), type_, ": member name '", name,
             "' registered twice");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name);
  KILN_CHECK(t.defined() && t.is_leaf(), type_, ": parameter '", name, "' must be a defined leaf tensor");
  t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  KILN_CHECK(t.defined(), type_, ": buffer '", name, "' is undefined");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name);
  KILN_CHECK(m != nullptr, type_, ": child '", name, "' is null");
  m->train(training_);
  children_.emplace_back(name, std::move(m));
}

// ---------------------------------------------------------------------------------------------
// Config
json Module::to_json() const {
  throw NoConfigError("model '" + type_ + "' was built in code and has no config (Module::to_json() is not "
                      "overridden); what asked for it (a run's config.json, kiln export, predicting from a run) "
                      "needs one: register it (docs/library.md) or override to_json()",
                      type_);
}

json Module::config_for(const std::string& feature) const {
  try {
    return to_json();
  } catch (const NoConfigError& e) {
    const std::string inner = e.module_type() == type_ ? "" : " (its module '" + e.module_type() + "' has none)";
    KILN_FAIL("model '", type_, "' was built in code and has no config", inner, "; ", feature,
              " needs one: register it (docs/library.md) or override to_json()");
  }
}

// ---------------------------------------------------------------------------------------------
// Traversal
void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (const auto& [name, t] : params ? params_ : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& kv : named_parameters()) out.push_back(kv.second);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& kv : named_parameters()) n += kv.second.numel();
  return n;
}

StateDict Module::state_dict() const {
  StateDict sd;
  for (auto& [name, t] : named_parameters()) sd[name] = t.detach();
  for (auto& [name, t] : named_buffers()) sd[name] = t.detach();
  return sd;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [name, child] : children_)
    for (auto& [sub, m] : child->named_modules()) out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  return out;
}

Module& Module::submodule(const std::string& path) {
  Module* m = this;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    auto it = std::find_if(m->children_.begin(), m->children_.end(), [&](const auto& kv) { return kv.first == part; });
    if (it == m->children_.end()) {
      std::vector<std::string> names;
      for (auto& kv : m->children_) names.push_back(kv.first);
      KILN_FAIL(type_, ": no submodule '", path, "' (", m->type_, " has children: ",
                names.empty() ? "none" : join(names), ")");
    }
    m = it->second.get();
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return *m;
}

// ---------------------------------------------------------------------------------------------
// State dicts
void check_state_dict(const std::vector<std::pair<std::string, Shape>>& expected, const StateDict& given, bool strict,
                      const std::string& what) {
  std::vector<std::string> missing, unexpected, mismatched;
  std::map<std::string, const Shape*> want;
  for (const auto& [name, shape] : expected) {
    want[name] = &shape;
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (!it->second.defined()) {
      mismatched.push_back(name + " (undefined tensor, expected " + shape_str(shape) + ")");
    } else if (it->second.shape() != shape) {
      mismatched.push_back(name + " (" + shape_str(it->second.shape()) + ", expected " + shape_str(shape) + ")");
    }
  }
  for (const auto& kv : given)
    if (!want.count(kv.first)) unexpected.push_back(kv.first);
  bool bad = !mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (!bad) return;
  std::string msg = what + ": the state dict does not fit the model.";
  if (strict && !missing.empty()) msg += " Missing keys: " + list_some(missing) + ".";
  if (strict && !unexpected.empty()) msg += " Unexpected keys: " + list_some(unexpected) + ".";
  if (!mismatched.empty()) msg += " Wrong shapes: " + list_some(mismatched) + ".";
  KILN_FAIL(msg);
}

void Module::load_state_dict(const StateDict& sd, bool strict) {
  NamedTensors all = named_parameters();
  for (auto& kv : named_buffers()) all.push_back(kv);
  std::vector<std::pair<std::string, Shape>> expected;
  for (auto& [name, t] : all) expected.emplace_back(name, t.shape());
  check_state_dict(expected, sd, strict, type_ + " load_state_dict");
  NoGradGuard ng;
  for (auto& [name, t] : all) {
    auto it = sd.find(name);
    if (it == sd.end()) continue;
    if (it->second.same(t)) continue;
    t.detach().copy_(it->second);
  }
}

// ---------------------------------------------------------------------------------------------
// Modes and devices
void Module::train(bool on) {
  training_ = on;
  for (auto& kv : children_) kv.second->train(on);
}

void Module::to(Device device) {
  for (auto& kv : params_) move_in_place(kv.second, device);
  for (auto& kv : buffers_) move_in_place(kv.second, device);
  for (auto& kv : children_) kv.second->to(device);
}

void Module::zero_grad() {
  for (auto& kv : named_parameters()) kv.second.zero_grad();
}

// ---------------------------------------------------------------------------------------------
// Recomputation flag
Tensor param_for_input(const Tensor& param, const Tensor& x) {
  if (!param.defined() || param.dtype() == x.dtype()) return param;
  bool low = x.dtype() == DType::bf16 || x.dtype() == DType::f16;
  return low && param.dtype() == DType::f32 ? param.to(x.dtype()) : param;
}

bool is_recomputing() { return t_recomputing; }
RecomputeScope::RecomputeScope(bool on) : prev_(t_recomputing) { t_recomputing = on; }
RecomputeScope::~RecomputeScope() { t_recomputing = prev_; }

// ---------------------------------------------------------------------------------------------
// Freezing
bool name_under(const std::string& name, const std::string& prefix) {
  return name.size() >= prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
         (name.size() == prefix.size() || name[prefix.size()] == '.');
}

std::vector<std::string> freeze(Module& m, const std::vector<std::string>& prefixes, const std::string& what) {
  NamedTensors params = m.named_parameters();
  auto frozen_name = [&](const std::string& name) {
    return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return name_under(name, p); });
  };
  for (size_t i = 0; i < prefixes.size(); ++i) {
    const std::string& p = prefixes[i];
    bool used = std::any_of(params.begin(), params.end(), [&](const auto& kv) { return name_under(kv.first, p); });
    if (used) continue;
    std::vector<std::string> tops;  // the top-level names, which is what a prefix usually is
    for (auto& [name, child] : m.named_children())
      if (!child->named_parameters().empty()) tops.push_back(name);
    KILN_FAIL(what, "[", i, "] = \"", p, "\" matches no parameter of ", m.type(), "; accepted: a module path or a "
              "parameter name (dotted, e.g. \"layer1\", \"layer1.0.conv1\", \"fc.weight\"); the model's top-level "
              "modules with parameters are: ", tops.empty() ? "none" : join(tops));
  }
  std::vector<std::string> out;
  for (auto& [name, t] : params) {
    if (!frozen_name(name)) continue;
    t.zero_grad();
    t.set_requires_grad(false);
    out.push_back(name);
  }
  for (auto& entry : m.named_modules()) {
    // (not a structured binding: clang before 16 cannot capture one in the lambda below)
    const std::string& path = entry.first;
    const auto& mod = entry.second;
    NamedTensors own = mod->named_parameters();
    bool all = !own.empty() && std::all_of(own.begin(), own.end(), [&](const auto& kv) {
      return frozen_name(path.empty() ? kv.first : path + "." + kv.first);
    });
    if (all) mod->set_frozen(true);
  }
  return out;
}

}  // namespace kiln
