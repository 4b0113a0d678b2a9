// Matrix products. CPU: oneDNN matmul (f32; bf16 and f16 where the CPU supports them, else computed
// in f32 and rounded, see docs/precision.md and core/cpu/linear.cpp); CUDA: cuBLASLt
// (core/cuda/matmul_cuda.cu). Transposed or sliced 2-D views are read in place. Recorded by autograd
// (core/ops/linear.cpp). Tests: tests/core/linear_test.cpp.
#pragma once
#include "core/tensor.h"

namespace kiln::ops {

// a: (M, K), b: (K, N) -> (M, N). Both 2-D; dtypes equal.
Tensor matmul(const Tensor& a, const Tensor& b);
// x: (N, in), w: (out, in) (PyTorch's Linear layout), b: (out) or undefined -> (N, out).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

}  // namespace kiln::ops
