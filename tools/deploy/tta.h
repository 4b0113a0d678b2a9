// Test-time augmentation for evaluation (train.tta, `kiln eval ... tta=flip`; docs/mixup_tta.md).
// Tests: tests/engine/tta_test.cpp.
#pragma once
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace kiln {

// What an evaluation scores for a batch of images (N, H, W, C) on the CPU, as (N, K) f32 on the CPU:
//   tta "none": the model's logits (exactly what evaluation used before TTA existed);
//   tta "flip": log of the mean of softmax(model(x)) and softmax(model(mirror(x))), mirror = left-right
//               (along W). A softmax of these is the averaged probability, so the loss, top-k and the
//               confusion matrix computed from them are those of the averaged prediction (the loss
//               is -log of the mean probability of the true class; probabilities below the smallest
//               normal f32, 1.2e-38, count as that).
// The images go to `device` in `compute` dtype; the caller sets eval mode and no-grad.
Tensor eval_scores(Module& model, const Tensor& images, Device device, DType compute, const std::string& tta);

// log((softmax(a) + softmax(b)) / 2) of two (N, K) logits on the CPU, as f32.
Tensor mean_softmax_log(const Tensor& a, const Tensor& b);

}  // namespace kiln
