// Softmax cross-entropy, mean over the batch, computed in f32 (log-sum-exp with the max subtracted).
//   logits: (N, K) floating; labels: (N) i64 or i32 in [0, K)
//   label_smoothing e: target = (1-e)*onehot + e/K (PyTorch's definition)
// Returns a scalar (shape []). Recorded by autograd (gradient to logits).
// Tests: tests/core/loss_test.cpp.
#pragma once
#include "core/tensor.h"

namespace kiln::ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing = 0.0);
// Row-wise softmax, not recorded (for evaluation and tests).
Tensor softmax(const Tensor& logits);

}  // namespace kiln::ops
