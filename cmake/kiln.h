// kiln's umbrella header, for programs that use kiln as a library (docs/library.md):
//
//   #include <kiln/kiln.h>      // installed: P/include/kiln/kiln.h; in the build tree: build/include/kiln/kiln.h
//
// brings every header of the package's base component (find_package(kiln); link kiln::deploy, which
// links models, layers, data and core, and kiln::optim for the optimizers):
//   tensors, devices, dtypes, autograd, random numbers, errors, registries  core/
//   the ops (arithmetic, conv, pooling, batch norm, losses, argmax)         core/ops/
//   safetensors files                                                       core/io/
//   Module and the layers, PyTorch interop, save_weights / load_weights     layers/
//   the models' registry (build_model, register_model), the built-in models models/
//   optimizers, parameter utilities, schedules, loss scaler, EMA            optim/
//   data sources, transforms, the loader, a data config                     data/
//   a run's config, checkpoints' weights, load_model, Predictor             tools/deploy/
// Names: everything is in namespace kiln, the ops in kiln::ops.
//
// The training engine is a component of its own (find_package(kiln COMPONENTS engine), kiln::engine:
// it links MPI where kiln was built with it): its umbrella, <kiln/engine.h> (cmake/engine.h), is this
// header plus kiln::train. The package's umbrella headers live here in cmake/, beside the package's
// config, one per component; each is installed by one kiln_umbrella_header() line in the top
// CMakeLists.txt (cmake/KilnPackage.cmake).
//
// Only programs include this: kiln's own files include what each uses (docs/architecture.md), and
// the layering test (tests/layering) refuses an include of it inside the libraries.
// Tests: tests/engine/umbrella_test.cpp (this header alone, first in its file), the example
// examples/custom_loop.cpp built against the installed package (tests/install/install_test.sh).
#pragma once

// clang-format off
// --- core: tensors, autograd, devices, errors, random numbers, files --------------------------
#include "core/autograd.h"
#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/io/safetensors.h"
#include "core/json_reader.h"
#include "core/registry.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/version.h"

// --- the ops: arithmetic, reductions, nn ops, losses (kiln::ops) --------------------------------
#include "core/ops/batch_norm.h"
#include "core/ops/conv2d.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/loss.h"
#include "core/ops/lrn.h"
#include "core/ops/normalize_u8.h"
#include "core/ops/pool.h"
#include "core/ops/reduce.h"
#include "core/ops/shape_ops.h"
#include "core/ops/silu.h"

// --- layers: Module, the layers, weights in kiln's or PyTorch's layout ------------------------
#include "layers/activation.h"
#include "layers/blocks.h"
#include "layers/conv.h"
#include "layers/init.h"
#include "layers/interop.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/norm.h"
#include "layers/pooling.h"
#include "layers/recompute.h"
#include "layers/registry.h"
#include "layers/sequential.h"

// --- models: the registry and the built-in models --------------------------------------------
#include "models/alexnet.h"
#include "models/lenet.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "models/vgg.h"

// --- optim: optimizers, gradient utilities, schedules, loss scaling, EMA ----------------------
#include "optim/adamw.h"
#include "optim/ema.h"
#include "optim/lars.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "optim/param.h"
#include "optim/registry.h"
#include "optim/sgd.h"

// --- data: sources, transforms, the loader, a config's "data" section -------------------------
#include "data/cifar.h"
#include "data/config.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/image_input.h"
#include "data/loader.h"
#include "data/mix.h"
#include "data/normalize.h"
#include "data/pipeline.h"
#include "data/synthetic.h"

// --- deploy: a run's config and weights, a model from them, prediction ------------------------
#include "tools/deploy/checkpoint.h"
#include "tools/deploy/config.h"
#include "tools/deploy/model_io.h"
#include "tools/deploy/precision.h"
#include "tools/deploy/predict.h"
#include "tools/deploy/tta.h"
// clang-format on
