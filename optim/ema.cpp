// The weight EMA: options, checks, the CPU update and the dispatch to the CUDA kernel.
#include "optim/ema.h"

#include <algorithm>

#include "core/check.h"

#ifdef KILN_WITH_CUDA
namespace kiln::cuda {
// optim/ema_cuda.cu: ema = d * ema + (1 - d) * w over n f32 elements, on the device's stream.
void ema_update_f32(float* ema, const float* w, int64_t n, float d, int device);
}  // namespace kiln::cuda
#endif

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

void WeightEma::update(int64_t t) {
  const float d = static_cast<float>(decay_at(t));
  const float one_minus_d = 1.0f - d;
  for (const Entry& e : entries_) {
    if (!e.average) {
      copy_tensor(e.ema, e.live);  // a device-to-device copy on a GPU: no host wait
      continue;
    }
    const int64_t n = e.live.numel();
    if (e.live.device().is_cuda()) {
#ifdef KILN_WITH_CUDA
      cuda::ema_update_f32(e.ema.data<float>(), e.live.data<float>(), n, d, e.live.device().index);
      continue;
#else
      KILN_FAIL("EMA: a CUDA tensor in a build without CUDA");
#endif
    }
    float* a = e.ema.data<float>();
    const float* w = e.live.data<float>();
    for (int64_t i = 0; i < n; ++i) a[i] = d * a[i] + one_minus_d * w[i];
  }
}

void WeightEma::reset_to_live() {
  for (const Entry& e : entries_) copy_tensor(e.ema, e.live);
}

}  // namespace kiln
