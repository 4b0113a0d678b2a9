// One image file as a model's input, with a data config's validation transforms: what a trained
// classifier needs for a single picture outside the loader (examples/classify.cpp, docs/library.md).
// Tests: tests/data/image_input_test.cpp.
#pragma once
#include <string>

#include "core/tensor.h"
#include "data/config.h"

namespace kiln {

// Decodes `path` (JPEG, PNG, BMP or WebP; data/image_decode.h) with the channel count of `data`'s
// source (1 for mnist/fashion_mnist, 3 for cifar, data.channels for image folders), runs
// data.val_transforms and the normalisation, and returns a (1, H, W, C) f32 CPU tensor: one NHWC
// batch as the loader gives the model. When the transforms give a fixed shape for the source's images
// (e.g. a 28x28 source without a resize), an image that comes out at another shape is an error
// naming the file and both shapes, rather than a shape error deep in the model.
Tensor load_input_image(const std::string& path, const DataConfig& data);

}  // namespace kiln
