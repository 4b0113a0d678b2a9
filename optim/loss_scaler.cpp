// Dynamic loss scaling. The scale stays a power of two with the default factors, so scaling and
// unscaling the gradients are exact and a run with skipped steps equals one that never took them.
// On a GPU the unscale and the finite check are one multi-tensor launch (core/cuda/optim_cuda.cu);
// host mode reads its flag back, device mode leaves the verdict and the rule on the device.
#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/ops/elementwise.h"

#include "core/optim_kernels.h"

namespace kiln {

LossScalerOptions LossScalerOptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  LossScalerOptions o;
  o.init_scale = r.get("init_scale", o.init_scale, 1e-30, 1e30);
  o.growth_factor = r.get("growth_factor", o.growth_factor, 1.0, 1e6);
  o.backoff_factor = r.get("backoff_factor", o.backoff_factor, 1e-6, 1.0);
  o.growth_interval = r.get("growth_interval", o.growth_interval, int64_t(1), int64_t(1) << 40);
  o.min_scale = r.get("min_scale", o.min_scale, 1e-30, 1e30);
  o.max_nonfinite_steps = r.get("max_nonfinite_steps", o.max_nonfinite_steps, int64_t(1), int64_t(1) << 40);
  r.finish();
  o.validate(path);
  return o;
}

json LossScalerOptions::to_json() const {
  return {{"init_scale", init_scale},       {"growth_factor", growth_factor}, {"backoff_factor", backoff_factor},
          {"growth_interval", growth_interval}, {"min_scale", min_scale},     {"max_nonfinite_steps", max_nonfinite_steps}};
}

void LossScalerOptions::validate(const std::string& path) const {
  auto in = [&](const char* key) { return path.empty() ? std::string(key) : path + "." + key; };
  KILN_CHECK(std::isfinite(init_scale) && init_scale > 0, in("init_scale"), " = ", init_scale, " must be > 0");
  KILN_CHECK(growth_factor >= 1, in("growth_factor"), " = ", growth_factor, " must be >= 1");
  KILN_CHECK(backoff_factor > 0 && backoff_factor <= 1, in("backoff_factor"), " = ", backoff_factor, " must be in (0, 1]");
  KILN_CHECK(growth_interval >= 1, in("growth_interval"), " = ", growth_interval, " must be >= 1");
  KILN_CHECK(min_scale > 0 && min_scale <= init_scale, in("min_scale"), " = ", min_scale, " must be in (0, init_scale = ",
             init_scale, "]");
  KILN_CHECK(max_nonfinite_steps >= 1, in("max_nonfinite_steps"), " = ", max_nonfinite_steps, " must be >= 1");
}

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(options.init_scale) {
  options_.validate("loss_scaler");
}

Tensor LossScaler::scale_loss(const Tensor& loss) const {
  if (on_device_ && loss.device() == scale32_.device()) return ops::mul(loss, scale32_);
  return ops::mul_scalar(loss, host().scale_);
}

LossScaleRule LossScaler::rule() const {
  LossScaleRule r;
  r.growth_factor = options_.growth_factor;
  r.backoff_factor = options_.backoff_factor;
  r.min_scale = options_.min_scale;
  r.growth_interval = options_.growth_interval;
  return r;
}

const LossScaler& LossScaler::host() const {
  if (on_device_ && !host_fresh_) {
    const std::vector<double> v = state_.to(Device::cpu()).to_double_vector();  // waits for the device
    scale_ = v[kScale];
    growth_tracker_ = static_cast<int64_t>(v[kGrowthTracker]);
    consecutive_nonfinite_ = static_cast<int64_t>(v[kConsecutiveNonfinite]);
    skipped_ = static_cast<int64_t>(v[kSkipped]);
    host_fresh_ = true;
  }
  return *this;
}

void LossScaler::to_host() {
  host();
  on_device_ = false;
  state_ = scale32_ = found_inf_ = Tensor();
}

void LossScaler::unscale_on_device(const std::vector<ParamRef>& params) {
  KILN_CHECK(!unscaled_finite_.has_value(),
             "LossScaler: unscale_and_check was called this iteration; device mode takes unscale_on_device, "
             "the optimizer's step_unless(found_inf()) and update_on_device()");
  std::vector<Tensor> gs;
  for (const auto& p : params) {
    Tensor grad = dense_grad(p, "LossScaler");
    if (grad.defined()) gs.push_back(grad);
  }
  const Device d = gs.empty() ? Device::cpu() : gs[0].device();
  if (!on_device_ || state_.device() != d) {  // the host's state (or another device's) moves here
    host();
    std::vector<double> v(kLossScaleStateSize);
    v[kScale] = scale_;
    v[kGrowthTracker] = static_cast<double>(growth_tracker_);
    v[kConsecutiveNonfinite] = static_cast<double>(consecutive_nonfinite_);
    v[kSkipped] = static_cast<double>(skipped_);
    state_ = Tensor::from_vector(v, {kLossScaleStateSize}, DType::f64).to(d);
    scale32_ = Tensor::full({}, static_cast<float>(scale_), DType::f32, d);
    found_inf_ = Tensor::zeros({}, DType::i32, d);
    on_device_ = true;
  }
  loss_scale_unscale_kernel.get(d, "LossScaler")(gs, state_, found_inf_);
  host_fresh_ = false;
}

void LossScaler::update_on_device() {
  KILN_CHECK(on_device_, "LossScaler: update_on_device without unscale_on_device this iteration");
  loss_scale_update_kernel.get(state_.device(), "LossScaler")(state_, scale32_, found_inf_, rule());
  host_fresh_ = false;
}

void LossScaler::check_consecutive() const {
  KILN_CHECK(consecutive_nonfinite_ < options_.max_nonfinite_steps, "fp16 loss scaling: the loss or its gradients were ",
             "non-finite (inf/NaN) for ", consecutive_nonfinite_, " iterations in a row (loss scale now ", scale_,
             ", floor ", options_.min_scale, "): the values overflow fp16 or training diverges. ",
             "Try precision=bf16 (no overflow, no scaling), a lower learning rate, or gradient clipping.");
}

void LossScaler::poll() {
  if (!on_device_) return;
  host().check_consecutive();
}

bool LossScaler::unscale_and_check(const std::vector<ParamRef>& params) {
  if (on_device_) to_host();
  KILN_CHECK(!unscaled_finite_.has_value(),
             "LossScaler: unscale_and_check was already called this iteration (call update() after each step)");
  const float inv = static_cast<float>(1.0 / scale_);
  std::vector<Tensor> gs;
  for (const auto& p : params) {
    Tensor grad = dense_grad(p, "LossScaler");
    if (grad.defined()) gs.push_back(grad);
  }
  // One pass per gradient (one launch for all on a GPU): g *= 1/scale, and whether all stayed finite.
  const Device d = gs.empty() ? Device::cpu() : gs[0].device();
  unscaled_finite_ = scale_and_check_finite_kernel.get(d, "LossScaler")(gs, inv);
  return *unscaled_finite_;
}

Tensor LossScaler::last_step_skipped() const {
  if (!state_.defined()) return Tensor();
  return state_.slice(0, kConsecutiveNonfinite, kConsecutiveNonfinite + 1);
}

void LossScaler::update(bool found_inf) {
  if (on_device_) to_host();
  // A failed unscale_and_check this iteration counts even if the caller passes false.
  if (unscaled_finite_.has_value() && !*unscaled_finite_) found_inf = true;
  unscaled_finite_.reset();
  double state[kLossScaleStateSize] = {scale_, static_cast<double>(growth_tracker_),
                                       static_cast<double>(consecutive_nonfinite_), static_cast<double>(skipped_)};
  apply_loss_scale_rule(state, found_inf, rule());  // the rule the device applies in device mode
  scale_ = state[kScale];
  growth_tracker_ = static_cast<int64_t>(state[kGrowthTracker]);
  consecutive_nonfinite_ = static_cast<int64_t>(state[kConsecutiveNonfinite]);
  skipped_ = static_cast<int64_t>(state[kSkipped]);
  if (found_inf) check_consecutive();
}

bool LossScaler::step(Optimizer& opt) {
  bool finite = unscaled_finite_.has_value() ? *unscaled_finite_ : unscale_and_check(opt.params());
  if (finite) opt.step();
  update(!finite);
  return finite;
}

std::map<std::string, double> LossScaler::state_dict() const {
  host();
  return {{"scale", scale_},
          {"growth_tracker", static_cast<double>(growth_tracker_)},
          {"consecutive_nonfinite", static_cast<double>(consecutive_nonfinite_)},
          {"skipped_steps", static_cast<double>(skipped_)}};
}

void LossScaler::load_state_dict(const std::map<std::string, double>& state) {
  const std::vector<std::string> keys = {"scale", "growth_tracker", "consecutive_nonfinite", "skipped_steps"};
  for (const auto& [key, value] : state)
    KILN_CHECK(std::find(keys.begin(), keys.end(), key) != keys.end(), "LossScaler load_state_dict: unknown key '", key,
               "'; accepted: ", join(keys));
  for (const auto& key : keys) KILN_CHECK(state.count(key), "LossScaler load_state_dict: missing key '", key, "'");
  double scale = state.at("scale");
  KILN_CHECK(std::isfinite(scale) && scale > 0, "LossScaler load_state_dict: scale = ", scale, " must be finite and > 0");
  auto count = [&](const std::string& key) {
    double v = state.at(key);
    KILN_CHECK(v >= 0 && v == std::floor(v) && v < 9.0e15, "LossScaler load_state_dict: ", key, " = ", v,
               " is not a count");
    return static_cast<int64_t>(v);
  };
  int64_t growth = count("growth_tracker"), consecutive = count("consecutive_nonfinite"), skipped = count("skipped_steps");
  on_device_ = false;  // the loaded state is the host's; device mode starts again from it
  host_fresh_ = true;
  state_ = scale32_ = found_inf_ = Tensor();
  scale_ = scale;
  growth_tracker_ = growth;
  consecutive_nonfinite_ = consecutive;
  skipped_ = skipped;
  unscaled_finite_.reset();
}

}  // namespace kiln
