// Matrix products. CPU: oneDNN matmul (f32; bf16 and f16 where the CPU supports them, else computed
// in f32 and rounded, see docs/precision.md and core/cpu/linear.cpp); CUDA: cuBLASLt
// (core/cuda/matmul_cuda.cu). Transposed or sliced 2-D views are read in place. Recorded by autograd
// (core/ops/linear.cpp). Tests: tests/core/linear_test.cpp.
#pragma once
#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

// a: (M, K), b: (K, N) -> (M, N). Both 2-D; dtypes equal.
Tensor matmul(const Tensor& a, const Tensor& b);
// x: (N, in), w: (out, in) (PyTorch's Linear layout), b: (out) or undefined -> (N, out).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

}  // namespace kiln::ops

namespace kiln {

// --- the matrix product's kernel (core/kernel_slot.h): op(a) (M, K) x op(b) (K, N) [+ bias (N)] ->
// (M, N), op = transpose where the flag is set (a is then (K, M)); a transposed operand is read in
// place, never copied. a, b, bias 2-D/1-D of one dtype (f32, bf16, f16), f32 accumulation, result
// in that dtype; K = 0 gives zeros (plus the bias). Shapes checked by the op.
extern KernelSlot<Tensor (*)(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& bias)>
    matmul_kernel;

}  // namespace kiln
