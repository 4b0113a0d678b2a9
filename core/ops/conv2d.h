// 2-D convolution on NHWC activations.
//   x: (N, H, W, Cin)   w: (Cout, KH, KW, Cin/groups)   b: (Cout) or undefined
//   y: (N, OH, OW, Cout), OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1
// The op (core/ops/conv2d.cpp) checks and records; its kernels are the device's kernel-table entries.
// CPU (core/cpu/conv2d.cpp): oneDNN (primitives cached per shape), f32 and bf16 (also f16); x, w and
// b share one dtype. On CPUs without native low-precision kernels (no avx512) bf16/f16 are computed
// in f32 and rounded. Backward-data and backward-weights are oneDNN primitives too. On CPUs with
// AVX-512 BF16, 3x3 stride-1 convolutions of 64+ channels (bf16; 128+ in f32) run Winograd
// F(2x2,3x3) and stride-2 3x3 weight gradients one im2col GEMM instead (core/cpu/winograd.h;
// KILN_CONV_ALGO=direct turns both off). CUDA: cuDNN (core/cuda/conv2d_cuda.cu).
// Tests: tests/core/conv2d_test.cpp.
#pragma once
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
