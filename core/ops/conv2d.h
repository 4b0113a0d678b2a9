// 2-D convolution on NHWC activations.
//   x: (N, H, W, Cin)   w: (Cout, KH, KW, Cin/groups)   b: (Cout) or undefined
//   y: (N, OH, OW, Cout), OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1
// The op (core/ops/conv2d.cpp) checks and records; its kernels fill the slots declared below.
// CPU (core/cpu/conv2d.cpp): oneDNN (primitives cached per shape), f32 and bf16 (also f16); x, w and
// b share one dtype. On CPUs without native low-precision kernels (no avx512) bf16/f16 are computed
// in f32 and rounded. Backward-data and backward-weights are oneDNN primitives too. On CPUs with
// AVX-512 BF16, 3x3 stride-1 convolutions of 64+ channels (bf16; 128+ in f32) run Winograd
// F(2x2,3x3) and stride-2 3x3 weight gradients one im2col GEMM instead (core/cpu/winograd.h;
// KILN_CONV_ALGO=direct turns both off). CUDA: cuDNN (core/cuda/conv2d_cuda.cu).
// Tests: tests/core/conv2d_test.cpp.
#pragma once
#include <memory>

#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);

}  // namespace kiln::ops

namespace kiln {

// conv2d's backward (core/ops/conv2d.cpp): what the op asks for and what it gets back.
struct Conv2dBackwardArgs {
  Shape x_shape, w_shape;  // the forward's input and weight shapes
  ops::Conv2dParams p;
  DType dtype = DType::f32;  // the forward's dtype (x, w and b share it)
  bool has_bias = false;     // the forward had a bias (whether or not its gradient is wanted)
  bool need_x = false, need_w = false, need_b = false;  // the gradients wanted
  // The forward's opaque handle (may be null), only for this backward: the CPU keeps its
  // reordered weights there for backward-data; CUDA leaves it null.
  std::shared_ptr<void> saved;
};
struct Conv2dGrads {
  Tensor dx, dw, db;  // undefined where not wanted
};

// --- conv2d's kernels (core/kernel_slot.h), NHWC x (N, H, W, Cin), w (Cout, KH, KW, Cin/groups),
// b (Cout) or undefined, one dtype (f32, bf16, f16), shapes checked by the op, N >= 1 (the op
// answers an empty batch itself). The forward returns y (N, OH, OW, Cout) in x's dtype; when
// `saved` is not null (the backward will want dx) it may leave there a handle for the backward (the
// CPU's reordered weights; the choice among the CPU's algorithms happens inside its kernels,
// core/conv_policy.h). The backward takes grad_out (N, OH, OW, Cout) in any floating dtype, x
// (defined when dw is wanted) and w (defined when dx is wanted), and returns dx, dw, db in
// args.dtype; db = grad_out summed over (N, OH, OW).
extern KernelSlot<Tensor (*)(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p,
                             std::shared_ptr<void>* saved)>
    conv2d_forward_kernel;
extern KernelSlot<Conv2dGrads (*)(const Tensor& grad_out, const Tensor& x, const Tensor& w,
                                  const Conv2dBackwardArgs& args)>
    conv2d_backward_kernel;

}  // namespace kiln
