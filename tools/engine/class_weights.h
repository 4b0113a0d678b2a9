// Class weights for imbalanced data: train.class_weights = "balanced" or a list of K numbers
// (trainer.h), turned into the (K) f32 weights of the weighted cross-entropy (core/ops/loss.h).
//   balanced: w_c = n_samples / (n_classes * count_c), as sklearn's compute_class_weight; a class
//   with no training sample gets 0 (it is never a target; sklearn refuses such a class).
// Counting needs only the labels: an image folder or list has them in its entries (no image is
// decoded); other sources hold their images in memory (idx, cifar) or make them (synthetic), so
// reading each sample once there is a copy, not a decode.
// Tests: tests/engine/class_weights_test.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "tools/engine/train_options.h"
#include "data/dataset.h"

namespace kiln {

// Samples per class of `d` (labels outside [0, num_classes) are the source's error to report).
std::vector<int64_t> class_counts(const Dataset& d);

// n / (K * count_c) per class, 0 where count_c = 0.
std::vector<double> balanced_class_weights(const std::vector<int64_t>& counts);

// The weights `option` asks for on the training split `train` (empty for null: unweighted); a list
// must have one number per class of the dataset.
std::vector<double> resolve_class_weights(const json& option, const Dataset& train, const std::string& path);

}  // namespace kiln
