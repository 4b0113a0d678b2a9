// The weight EMA: options, checks, and the update through the device's kernel (core/optim_kernels.h).
#include "optim/ema.h"

#include <algorithm>

#include "core/check.h"

#include "core/optim_kernels.h"

namespace kiln {

EmaOptions EmaOptions::from_json(const json& j, const std::string& path) {
  const char* accepted = "; accepted: false or null (no EMA), true (decay 0.9998 with warmup), or an object "
                         "{\"decay\": a number in (0, 1), \"warmup\": true|false, \"best_by\": \"live\"|\"ema\"}";
  EmaOptions o;
  if (j.is_null() || (j.is_boolean() && !j.get<bool>())) return o;
  o.enabled = true;
  if (j.is_boolean()) return o;
  KILN_CHECK(j.is_object(), "config: ", path, " = ", j.dump(), " is not accepted", accepted);
  JsonReader r(j, path);
  if (KeyRecorder* rec = KeyRecorder::current())  // read raw below: its type, default and range for `kiln config keys`
    rec->note({r.path_of("decay"), "number", o.decay, true, false, "(0, 1)"});
  if (r.has("decay")) {
    const json& d = r.raw("decay");
    KILN_CHECK(d.is_number() && d.get<double>() > 0 && d.get<double>() < 1, "config: ", r.path_of("decay"), " = ",
               d.dump(), " is not accepted; accepted: a number in (0, 1), e.g. 0.9998 (timm) or 0.999");
    o.decay = d.get<double>();
  }
  o.warmup = r.get("warmup", o.warmup);
  o.best_by = r.get_choice("best_by", o.best_by, {"live", "ema"});
  r.finish();
  return o;
}

json EmaOptions::to_json() const {
  if (!enabled) return false;
  return json{{"decay", decay}, {"warmup", warmup}, {"best_by", best_by}};
}

WeightEma::WeightEma(const EmaOptions& options, std::vector<Entry> entries)
    : options_(options), entries_(std::move(entries)) {
  for (const Entry& e : entries_) {
    KILN_CHECK(e.live.defined() && e.ema.defined(), "EMA: tensor '", e.name, "' is undefined");
    KILN_CHECK(e.live.shape() == e.ema.shape() && e.live.device() == e.ema.device(), "EMA: tensor '", e.name,
               "': the average ", e.ema.str(), " does not match the weights ", e.live.str());
    if (e.average)
      KILN_CHECK(e.live.dtype() == DType::f32 && e.ema.dtype() == DType::f32 && e.live.is_contiguous() &&
                     e.ema.is_contiguous(),
                 "EMA: averaged tensor '", e.name, "' must be contiguous f32 (", e.live.str(), ", ", e.ema.str(), ")");
    else
      KILN_CHECK(e.live.dtype() == e.ema.dtype(), "EMA: copied tensor '", e.name, "': ", e.live.str(), " vs ",
                 e.ema.str());
  }
}

double WeightEma::decay_at(int64_t t) const {
  if (!options_.warmup) return options_.decay;
  const double td = static_cast<double>(t);
  return std::min(options_.decay, (1.0 + td) / (10.0 + td));
}

void WeightEma::update(int64_t t, const Tensor& skip) {
  const float d = static_cast<float>(decay_at(t));
  for (const Entry& e : entries_) {
    if (!e.average) {
      // a device-to-device copy on a GPU: no host wait
      if (skip.defined()) ema_copy_kernel.get(e.live.device(), "EMA")(e.ema, e.live, skip);
      else copy_tensor(e.ema, e.live);
      continue;
    }
    // ema = d * ema + (1 - d) * w, in place, on the weights' device (no host wait on a GPU).
    ema_update_kernel.get(e.live.device(), "EMA")(e.ema, e.live, d, skip);
  }
}

void WeightEma::reset_to_live() {
  for (const Entry& e : entries_) copy_tensor(e.ema, e.live);
}

}  // namespace kiln
