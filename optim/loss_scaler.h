// Dynamic loss scaling for fp16 training (torch.cuda.amp.GradScaler's rule, plus a floor and an
// abort). Per iteration:
//
//   scaler.scale_loss(loss).backward();            // gradients are scaled by `scale`
//   bool ok = scaler.unscale_and_check(params);    // grads /= scale; false if any is inf/NaN
//   if (ok) { clip_grad_norm(...); opt.step(); }   // a non-finite step is skipped
//   scaler.update(!ok);
//
// (or `scaler.step(opt)` for the three lines without clipping). update(): a non-finite step
// multiplies the scale by backoff_factor (never below min_scale) and counts a skip; after
// growth_interval finite steps in a row the scale grows by growth_factor. After
// max_nonfinite_steps non-finite steps in a row, update() throws: fp16 cannot train this run.
// bf16 and f32 need no scaling.
//
// Device mode (a GPU step, tools/engine/train_step.cpp): the same iteration without reading anything back,
//
//   scaler.scale_loss(loss).backward();     // multiplied by the scale held on the device
//   scaler.unscale_on_device(params);       // grads /= scale; found_inf() = 1 if any is inf/NaN
//   opt.step_unless(scaler.found_inf());    // the optimizer's kernels leave everything as it is
//   scaler.update_on_device();              // update()'s rule (core/loss_scale_rule.h) on the device
//
// The scale and the counters then live in a small tensor on the device; the getters and
// state_dict() read it back (a wait: the trainer asks at its log interval), and poll() also throws
// update()'s error once max_nonfinite_steps non-finite iterations in a row have been counted (the
// steps in between were all skipped). Both modes give the same scale, counts and weights.
// Tests: tests/optim/loss_scaler_test.cpp.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "core/json_reader.h"
#include "core/loss_scale_rule.h"
#include "optim/optimizer.h"

namespace kiln {

struct LossScalerOptions {
  /// scale at the start of training (default 65536 = 2^16)
  double init_scale = 65536.0;
  /// factor applied after growth_interval finite steps in a row (default 2)
  double growth_factor = 2.0;
  /// factor applied after a non-finite step (default 0.5)
  double backoff_factor = 0.5;
  /// finite steps in a row before the scale grows (default 2000)
  int64_t growth_interval = 2000;
  /// the scale never backs off below this (default 1)
  double min_scale = 1.0;
  /// non-finite steps in a row after which training stops with an error (default 50)
  int64_t max_nonfinite_steps = 50;

  static LossScalerOptions from_json(const json& j, const std::string& path = "train.loss_scaler");
  json to_json() const;
  void validate(const std::string& path) const;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const { return host().scale_; }
  // loss * scale, recorded by autograd (the scale on the device in device mode).
  Tensor scale_loss(const Tensor& loss) const;
  // Multiplies every gradient by 1/scale in place (one fused pass per parameter that also checks
  // for inf/NaN) and returns whether all were finite. Once per iteration, before update().
  bool unscale_and_check(const std::vector<ParamRef>& params);
  // Adjusts the scale after an iteration (found_inf: the gradients, or the loss, were not finite;
  // a failed unscale_and_check of this iteration counts as found_inf too).
  // Throws kiln::Error after max_nonfinite_steps non-finite iterations in a row.
  void update(bool found_inf);
  // unscale_and_check(opt.params()) unless already done this iteration, opt.step() when finite,
  // update(). Returns whether the optimizer stepped.
  bool step(Optimizer& opt);

  int64_t skipped_steps() const { return host().skipped_; }     // non-finite iterations in total
  int64_t consecutive_nonfinite() const { return host().consecutive_nonfinite_; }
  int64_t growth_tracker() const { return host().growth_tracker_; }  // finite iterations since the last change
  const LossScalerOptions& options() const { return options_; }

  // --- device mode (above): nothing is read back until a getter, state_dict() or poll() ---
  // grads *= 1/scale in place on their device; found_inf() becomes 1 if any is not finite. The
  // state moves to that device on first use (and back to the host for the host-mode calls).
  void unscale_on_device(const std::vector<ParamRef>& params);
  // i32 [] on the gradients' device: nonzero when this iteration's gradients were not finite.
  const Tensor& found_inf() const { return found_inf_; }
  // After update_on_device(): an f64 [1] view of the device state's count of non-finite steps in a
  // row, > 0 exactly when the step just updated was skipped (WeightEma::update's `skip`). Undefined
  // outside device mode.
  Tensor last_step_skipped() const;
  // update()'s rule on the device with found_inf() as the verdict; found_inf() is 0 again after.
  void update_on_device();
  // Reads the state back and throws update()'s error when max_nonfinite_steps non-finite iterations
  // in a row have been counted. Host mode: nothing to read, nothing to do.
  void poll();
  bool on_device() const { return on_device_; }
  // A replayed CUDA graph ran unscale_on_device() and update_on_device() as captured (tools/engine/
  // cuda_graph.h): the device state changed without these calls, so the getters read it back again.
  void note_device_step() { host_fresh_ = false; }

  // {"scale", "growth_tracker", "consecutive_nonfinite", "skipped_steps"}; load checks every key.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  // This object with the host's fields current (read back from the device in device mode).
  const LossScaler& host() const;
  void to_host();  // ends device mode: the host's fields are the state again
  void check_consecutive() const;
  LossScaleRule rule() const;

  LossScalerOptions options_;
  // The state (the host's copy: the state itself in host mode, a copy refreshed by host() in device mode).
  mutable double scale_;
  mutable int64_t growth_tracker_ = 0;
  mutable int64_t consecutive_nonfinite_ = 0;
  mutable int64_t skipped_ = 0;
  std::optional<bool> unscaled_finite_;  // result of this iteration's unscale_and_check
  // Device mode: the state as core/loss_scale_rule.h lays it out (f64 (4)), the scale in f32 for
  // scale_loss, and the found-inf flag, all on the gradients' device.
  bool on_device_ = false;
  mutable bool host_fresh_ = true;  // the host's copy equals the device state (nothing queued since the read)
  Tensor state_, scale32_, found_inf_;
};

}  // namespace kiln
