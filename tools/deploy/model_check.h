// Checks made before a run creates anything (run folder, config.json, loaders, AutoBatch probes):
// that the data loader's buffers fit in memory, and that the model takes the data's images and
// gives a score per class. Each error names the config key to change. Called once from the
// trainer's setup (tools/engine/trainer.cpp). Tests: tests/engine/config_test.cpp (ModelCheck.*, LoaderMemory.*).
#pragma once
#include <cstdint>

#include "data/config.h"
#include "layers/module.h"

namespace kiln {

// The host bytes the train and val loaders of `data` hold in batch buffers with `batch` samples per
// rank (batch x image bytes x (prefetch + 1) buffers each, val with data.val_batch_size).
double loader_buffer_bytes(const DataConfig& data, ImageShape shape, int64_t batch);

// Throws naming data.batch_size, data.val_batch_size or data.prefetch and the memory when the
// loaders' buffers would exceed `available_bytes` (host_available_bytes(), core/device.h, by default: < 0).
void check_loader_memory(const DataConfig& data, ImageShape shape, int64_t batch, double available_bytes = -1);

// Runs two zero images of `shape` (the data's images after the train transforms) through `model`
// in eval mode without gradients (buffers untouched), on the device it is on, and checks that the
// output is (2, >= num_classes). On a mismatch throws naming the key: model.in_channels,
// model.layers[i], model.num_classes, or the image size (data.* and data.train_transforms).
// `model_path` is the model's JSON path ("model"). A model built in code (no config, layers/module.h)
// is checked by its output alone. Tests: tests/deploy/code_model_check_test.cpp (that case).
void check_model_fits_data(Module& model, const std::string& model_path, ImageShape shape, int64_t num_classes,
                           const std::string& data_source);

// Both checks for the trainer: `source_shape` is the dataset's image shape (before the transforms),
// `batch` the per-rank batch (1 while AutoBatch has not chosen).
void check_before_run(Module& model, const DataConfig& data, ImageShape source_shape, int64_t batch,
                      int64_t num_classes);

}  // namespace kiln
