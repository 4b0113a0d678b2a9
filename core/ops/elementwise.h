// Elementwise arithmetic with NumPy-style broadcasting (shapes aligned at the trailing dims; a dim
// of 1 or a missing leading dim broadcasts). Floating dtypes f32 and f64 on CPU; f16/bf16 inputs are
// computed in f32 and stored back in their dtype. Recorded by autograd. Any device: the kernels come
// from the slots declared below (core/kernel_slot.h).
// Tests: tests/core/autograd_test.cpp (values, broadcasting and gradients), tests/gpu/elementwise_test.cpp.
#pragma once
#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

Shape broadcast_shapes(const Shape& a, const Shape& b);  // throws naming both shapes

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& a, double s);
Tensor mul_scalar(const Tensor& a, double s);
Tensor neg(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor square(const Tensor& a);

// Not recorded (no gradient): used by metrics, optimizers and the loss scaler.
Tensor relu_backward(const Tensor& grad_out, const Tensor& out);
bool all_finite(const Tensor& a);

}  // namespace kiln::ops

namespace kiln {

// The elementwise kernels' operations.
enum class ElementwiseBinary { add, sub, mul, div, relu_backward };
enum class ElementwiseUnary { relu, exp, log, sqrt, square };

// --- the elementwise kernels (core/kernel_slot.h); the op has checked that the operands are
// floating and of one dtype. Binary: NumPy's broadcasting, shapes that do not broadcast throw
// ops::broadcast_shapes's error. Output: the broadcast shape in the inputs' dtype, math in f32
// (f64 for f64 tensors on the CPU).
// NaN propagates as in PyTorch: relu(NaN) = NaN; relu_backward(gy, y) = (y <= 0 ? 0 : gy), so a
// NaN output passes its gradient.
extern KernelSlot<Tensor (*)(ElementwiseBinary op, const Tensor& a, const Tensor& b)> binary_kernel;
extern KernelSlot<Tensor (*)(ElementwiseUnary op, const Tensor& a)> unary_kernel;
// y = x * mul + add, computed in f64 and rounded once to x's dtype (mul_scalar: add = 0,
// add_scalar: mul = 1; the CPU then leaves the unused term out, so neg(0) = -0).
extern KernelSlot<Tensor (*)(const Tensor& a, double mul, double add)> affine_kernel;
// False when any element is inf or NaN (integer tensors: true).
extern KernelSlot<bool (*)(const Tensor& a)> all_finite_kernel;

}  // namespace kiln
