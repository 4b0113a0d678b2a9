// Joining tensors. Recorded by autograd. Tests: tests/core/shape_ops_test.cpp.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace kiln::ops {

// Concatenates along `dim` (negative counts from the end); all other dims must match.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);

}  // namespace kiln::ops
