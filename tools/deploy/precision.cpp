// The device and precision of a run's config, and the precision names (tools/deploy/precision.h).
#include "tools/deploy/precision.h"

#include "core/check.h"

namespace kiln {

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names{"fp32", "bf16", "fp16", "auto"};
  return names;
}

RunDevice run_device_from_json(const json& train, const std::string& path) {
  RunDevice d;
  JsonReader r(train, path);  // no finish(): the other keys are the trainer's (TrainOptions checks them)
  d.device = device_option_from_json(r.raw("device"), r.path_of("device"), d.device);
  d.precision = r.get_choice("precision", d.precision, precision_names());
  return d;
}

std::string resolve_precision(const std::string& precision, Device device) {
  if (precision != "auto") return precision;
  return native_bf16(device) ? "bf16" : "fp32";
}

DType compute_dtype_of(const std::string& precision, Device device) {
  const std::string p = resolve_precision(precision, device);
  if (p == "bf16") return DType::bf16;
  if (p == "fp16") return DType::f16;
  KILN_CHECK(p == "fp32", "precision \"", precision, "\" is not accepted; accepted: fp32, bf16, fp16, auto");
  return DType::f32;
}

}  // namespace kiln
