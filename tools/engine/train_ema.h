// The trainer's side of the weight EMA (optim/ema.h): a second model of the same config whose
// parameters and buffers are the averages, on the training device. It is evaluated beside the live
// model every eval epoch and saved in every checkpoint as `<name>.ema.safetensors` (PyTorch layout,
// the same names as the live weights), so `kiln eval/predict/export weights=runs/x/best.ema.safetensors`
// use it (docs/ema_accumulate.md).
// Tests: tests/engine/accumulate_test.cpp (EMA through the trainer), tests/optim/ema_test.cpp.
#pragma once
#include <memory>

#include "core/device.h"
#include "core/json_reader.h"
#include "layers/module.h"
#include "optim/ema.h"

namespace kiln {

struct TrainingEma {
  std::shared_ptr<Module> model;  // the averages (evaluate and save this one)
  std::unique_ptr<WeightEma> ema;
};

// A model built from `model_config` (drawing no random numbers), on `device`, starting as a copy of
// `live`; nullptr when `options` is off. Parameters are averaged, buffers copied.
std::unique_ptr<TrainingEma> make_training_ema(const EmaOptions& options, const json& model_config, Module& live,
                                               Device device);

}  // namespace kiln
