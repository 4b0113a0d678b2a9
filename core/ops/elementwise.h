// Elementwise arithmetic with NumPy-style broadcasting (shapes aligned at the trailing dims; a dim
// of 1 or a missing leading dim broadcasts). Floating dtypes f32 and f64 on CPU; f16/bf16 inputs are
// computed in f32 and stored back in their dtype. Recorded by autograd. Any device: the kernels come
// from the device's table (core/kernels.h).
// Tests: tests/core/autograd_test.cpp (values, broadcasting and gradients), tests/gpu/elementwise_test.cpp.
#pragma once
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
