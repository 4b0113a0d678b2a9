// SGD update: one pass over each parameter's contiguous f32 data doing decay, momentum and the
// step together. Arithmetic is f32 in PyTorch's order (each multiply rounded, then the add), so
// results match torch.optim.SGD to the last bit or two (PyTorch may fuse a multiply-add). On a GPU
// the same rule runs as one multi-tensor launch over every parameter (core/cuda/optim_cuda.cu).
#include "optim/sgd.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

namespace kiln {

SGDOptions SGDOptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
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

namespace {

// One parameter's update. The options are template arguments so that each instantiation is a
// branch-free loop that vectorizes. NOTE: no decay term at all when weight decay is 0, as in
// PyTorch: 0 * inf would be NaN.
template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_update(float* p, const float* g, float* buf, int64_t n, float lr, float wd, float mom, float damp) {
#pragma omp parallel for simd if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (kDecay) d = d + wd * p[i];
    if constexpr (kMomentum) {
      float b;
      if constexpr (kFirst) b = d;
      else b = mom * buf[i] + damp * d;
      buf[i] = b;
      if constexpr (kNesterov) d = d + mom * b;
      else d = b;
    }
    p[i] = p[i] - lr * d;
  }
}

using SGDKernel = void (*)(float*, const float*, float*, int64_t, float, float, float, float);

template <bool kDecay>
SGDKernel pick(bool momentum, bool first, bool nesterov) {
  if (!momentum) return sgd_update<kDecay, false, false, false>;
  if (first) return nesterov ? sgd_update<kDecay, true, true, true> : sgd_update<kDecay, true, true, false>;
  return nesterov ? sgd_update<kDecay, true, false, true> : sgd_update<kDecay, true, false, false>;
}

}  // namespace

void SGD::step() {
  if (device().is_cuda()) {
#ifdef KILN_WITH_CUDA
    const bool momentum_on = options_.momentum != 0;
    std::vector<cuda::SgdEntry> entries;
    for (size_t k = 0; k < params_.size(); ++k) {
      Tensor grad = dense_grad(params_[k], "SGD");
      if (!grad.defined()) continue;
      cuda::SgdEntry e;
      e.param = params_[k].param;
      e.grad = grad;
      e.lr = this->lr() * params_[k].lr_mult;
      e.weight_decay = decay_for(k, options_.weight_decay, options_.no_decay_bn_bias);
      if (momentum_on) {
        e.first_step = !momentum_[k].defined();
        if (e.first_step) momentum_[k] = Tensor::empty(params_[k].param.shape(), DType::f32, device());
        e.momentum_buffer = momentum_[k];
      }
      entries.push_back(e);
    }
    cuda::sgd_step(entries, {options_.momentum, options_.dampening, options_.nesterov});
    return;
#endif
  }
  const float mom = static_cast<float>(options_.momentum);
  const float damp = static_cast<float>(1.0 - options_.dampening);
  const bool momentum = options_.momentum != 0;
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor grad = dense_grad(params_[k], "SGD");
    if (!grad.defined()) continue;
    const float lr = static_cast<float>(this->lr() * params_[k].lr_mult);
    const float wd = static_cast<float>(decay_for(k, options_.weight_decay, options_.no_decay_bn_bias));
    const bool first = momentum && !momentum_[k].defined();
    if (first) momentum_[k] = Tensor::empty(params_[k].param.shape());
    float* buf = momentum ? momentum_[k].data<float>() : nullptr;
    SGDKernel kernel = wd != 0.0f ? pick<true>(momentum, first, options_.nesterov)
                                  : pick<false>(momentum, first, options_.nesterov);
    kernel(params_[k].param.data<float>(), grad.data<float>(), buf, grad.numel(), lr, wd, mom, damp);
  }
}

OptimizerState SGD::state_dict() const {
  OptimizerState s;
  s.type = type();
  for (size_t k = 0; k < params_.size(); ++k)
    if (momentum_[k].defined()) s.tensors[params_[k].name + ".momentum_buffer"] = host_copy(momentum_[k]);
  return s;
}

void SGD::load_state_dict(const OptimizerState& state) {
  auto tensors = split_tensors(state, {"momentum_buffer"});
  split_scalars(state, {});
  for (size_t k = 0; k < params_.size(); ++k) {
    auto it = tensors[k].find("momentum_buffer");
    momentum_[k] = it == tensors[k].end() ? Tensor() : device_copy(it->second);
  }
}

}  // namespace kiln
