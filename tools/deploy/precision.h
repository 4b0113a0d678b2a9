// The device and precision a run's config names (train.device, train.precision), which training
// (TrainOptions, tools/engine/train_options.h) and prediction (Predictor, tools/deploy/predict.h) both
// read, and the precision names: "fp32", "bf16", "fp16" and "auto" (docs/precision.md). Prediction
// reads these two keys alone, so a predictor links no optimizer library; the training options check
// the whole "train" section. Tests: tests/deploy/precision_test.cpp, tests/engine/time_budget_test.cpp
// (resolve_precision).
#pragma once
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/json_reader.h"

namespace kiln {

// The values train.precision accepts: fp32, bf16, fp16, auto.
const std::vector<std::string>& precision_names();

// Where and in what a run's model computes: train.device and train.precision as the config gives them.
struct RunDevice {
  std::string device;               // train.device as parse_device_list() takes it ("" = the default device)
  std::string precision = "fp32";  // one of precision_names()
};
// train.device (a string, a GPU number or a list: device_option_from_json) and train.precision from
// the "train" section `train` (an object or null), each checked as TrainOptions checks it, errors
// naming `path`; the section's other keys are the trainer's and are not read here.
RunDevice run_device_from_json(const json& train, const std::string& path = "train");

// The dtype a model computes in for a precision name ("fp32", "bf16", "fp16"; master weights stay
// f32, docs/precision.md) on `device`; "auto" is resolve_precision's; throws for any other name.
DType compute_dtype_of(const std::string& precision, Device device);
// train.precision = "auto" on `device`: "bf16" where it has bf16 arithmetic units (native_bf16: a
// GPU of compute capability 8.0 or newer, a CPU with AVX-512 BF16 or AMX), else "fp32" (bf16 would
// compute in f32 with conversions, or by emulation, there: slower). Other names are returned as
// they are. The trainer takes bf16 only when every rank's device has the units.
std::string resolve_precision(const std::string& precision, Device device);

}  // namespace kiln
