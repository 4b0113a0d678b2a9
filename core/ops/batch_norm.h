// Batch normalisation over the channel (last) dim of NHWC activations (or (N, C) features).
//   training: normalise with the batch statistics and update running_mean/var in place
//             (running = (1-momentum)*running + momentum*batch; the variance update is unbiased, as in PyTorch)
//   eval:     normalise with running_mean/var
// Statistics are always computed in f32. CPU: oneDNN. Recorded by autograd (gradients for x, gamma,
// beta). Tests: tests/core/batch_norm_test.cpp.
#pragma once
#include "core/tensor.h"

namespace kiln::ops {

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace kiln::ops
