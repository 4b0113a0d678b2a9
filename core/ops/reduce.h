// Reductions. sum/mean are recorded by autograd; dims may be negative; keepdim keeps size-1 dims.
// Accumulation is in f64 for f64 inputs and f32 otherwise (blocked, so large sums stay accurate).
// Any device: the kernels come from the device's slots (sum_kernel below).
// Tests: tests/core/autograd_test.cpp, tests/core/nan_test.cpp, tests/gpu/ops_dispatch_test.cpp.
#pragma once
#include <vector>

#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

Tensor sum(const Tensor& x);  // all elements -> shape []
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// Not recorded. argmax and topk_indices rank on the host (one copy back for a CUDA x) and return the
// indices on x's device; metrics that want them on the host move logits there first.
Tensor argmax(const Tensor& x, int64_t dim);               // i64, dim removed
Tensor topk_indices(const Tensor& x, int64_t k);           // x: (N, K) -> i64 (N, k), largest first
double sum_of_squares(const Tensor& x);                    // for gradient-norm clipping
double max_abs(const Tensor& x);

// The shape of `s` reduced over `dims` (non-negative): those dims dropped, or kept as 1 with keepdim.
// Shared by the op and every device's sum kernel.
Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim);

}  // namespace kiln::ops

namespace kiln {

// --- the sum's kernel (core/kernel_slot.h): the sum over `dims` (sorted, distinct, in range: the op
// normalises them), keepdim keeping them as size 1. Output in x's dtype (floating); accumulated in
// f64 on the CPU, f32 on a GPU. (sum of squares and max |x| are core/optim_kernels.h's.)
extern KernelSlot<Tensor (*)(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim)> sum_kernel;

}  // namespace kiln
