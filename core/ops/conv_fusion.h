// A convolution whose input is the previous batch norm's affine + ReLU and whose output's
// per-channel statistics come with it: ResNet's BN -> ReLU -> conv, with the next BN's sums
// (kiln issue #36, section 2: stage 1 the forward op; stage 2 conv_scale_bias_relu_stats_train and
// bn_finalize with autograd, which layers/blocks.cpp's Bottleneck chains when `fused_bn_conv` is on).
//   x: (N, H, W, Cin) NHWC   scale, bias: (Cin)   w: (Cout, KH, KW, Cin)   (groups must be 1)
//   y     = conv2d(relu(x * scale[c] + bias[c]), w)      (N, OH, OW, Cout), x's dtype
//   sum   = sum of y over (N, OH, OW)                     (Cout), f32
//   sumsq = sum of y*y over (N, OH, OW)                   (Cout), f32
// x, scale, bias and w share one dtype: f16, bf16 or f32 (conv2d's dtypes).
// On a GPU the kernel of the slot below may run it as ONE cuDNN graph (scale-bias-ReLU-conv-genstats,
// core/cuda/conv_fusion_cuda.cu), chosen per shape by timing it against the unfused chain the first
// time a shape is seen; every cuDNN refusal runs the unfused chain. Everywhere else (the CPU, a build
// without cuDNN's frontend headers, KILN_CUDNN_FUSION=0, and whenever autograd must record the op)
// the op is the unfused chain of public ops: mul, add, relu, conv2d, sum (the sums of the values of
// y as rounded to its dtype, accumulated in f32). This op records only the unfused chain; the fused
// kernel runs when no input needs a gradient, and in training through conv_scale_bias_relu_stats_train.
// docs/cuda_backend.md, "cuDNN runtime fusion".
// Tests: tests/core/conv_fusion_test.cpp (the ops' contracts on the CPU), tests/gpu/conv_fusion_test.cpp; the
// training path: tests/layers/fused_bottleneck_test.cpp, tests/models/fused_resnet_test.cpp,
// tests/gpu/fused_bottleneck_test.cpp.
#pragma once
#include <functional>
#include <string>

#include "core/kernel_slot.h"
#include "core/ops/conv2d.h"
#include "core/tensor.h"

namespace kiln::ops {

struct ConvBnStats {
  Tensor y, sum, sumsq;
};

// How one call ran (for tests and `kiln bench conv_fusion`). fused_ms/unfused_ms: the first-seen
// timings of the shape (ms, best of 3 runs), -1 where not timed.
struct ConvFusionChoice {
  bool fused = false;        // this call ran cuDNN's fused graph
  std::string why;           // why it ran what it ran: "timed", "refused: <cuDNN's reason>", ...
  double fused_ms = -1, unfused_ms = -1;
};

ConvBnStats conv_scale_bias_relu_stats(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& w,
                                       const Conv2dParams& p, ConvFusionChoice* how = nullptr);
// The same values as a chain of public ops (recorded by autograd when an input needs a gradient).
ConvBnStats conv_scale_bias_relu_stats_unfused(const Tensor& x, const Tensor& scale, const Tensor& bias,
                                               const Tensor& w, const Conv2dParams& p);

// Stage 2, the op for training: the same forward as conv_scale_bias_relu_stats run on detached inputs
// (so on a GPU the fused cuDNN graph runs in training too), recorded by autograd as three nodes: y from
// (x, scale, bias, w), and sum and sumsq each from y. y's backward recomputes a = relu(x*scale + bias)
// and takes conv2d's backward kernel for da (dgrad) and dw (wgrad), then the ReLU mask
// (da = 0 where a <= 0), dscale = sum(da*x), dbias = sum(da) (over N, H, W, in f32), dx = da*scale.
// The sums' nodes fold their gradients into dy: d sum/dy = 1, d sumsq/dy = 2y (the engine adds them
// to the gradient coming from y's consumers). Same values and gradients as the unfused op under
// autograd, up to rounding. x must have a non-empty batch.
ConvBnStats conv_scale_bias_relu_stats_train(const Tensor& x, const Tensor& scale, const Tensor& bias,
                                             const Tensor& w, const Conv2dParams& p,
                                             ConvFusionChoice* how = nullptr);

// A training batch norm's finalize from per-channel sums over `count` values (count >= 2): the step
// that turns a fused conv's sum and sumsq into the next fused conv's scale and bias (stage 2's
// building block; composed of public ops, recorded by autograd when sum, sumsq, gamma or beta need a
// gradient, so the batch norm's backward through its batch statistics follows). In f32: mean = sum / count,
// var = max(sumsq / count - mean^2, 0) (biased; no shift, so precision drops where mean^2 >> var),
// invstd = 1 / sqrt(var + eps), scale = gamma * invstd, bias = beta - mean * scale (gamma, beta
// undefined: 1 and 0), scale and bias returned in `out` (the next conv's dtype). running_mean and
// running_var (f32, (C), both defined or both undefined) are updated in place as batch_norm does:
// running = (1 - momentum) * running + momentum * batch, the variance unbiased by count / (count - 1)
// (not recorded).
struct BnFinalized {
  Tensor scale, bias;   // (C) in `out`
  Tensor mean, invstd;  // (C) f32: what the batch norm's backward needs
};
BnFinalized bn_finalize(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma, const Tensor& beta,
                        const Tensor& running_mean, const Tensor& running_var, double momentum, double eps, DType out);

}  // namespace kiln::ops

namespace kiln {

// --- the fused kernel (core/kernel_slot.h), a kernel a device may lack (find(), not get()): detached
// x, scale, bias, w already checked by the op (one dtype, 4-D shapes, Cin matching, groups 1). Returns
// y in x's dtype and sum, sumsq (Cout) in f32, the values conv_scale_bias_relu_stats states. It calls
// `unfused` (the op's chain, no autograd) for any shape, dtype or setting it does not fuse, and to
// time the alternative; it fills `how` when not null.
using ConvFusionUnfused = std::function<ops::ConvBnStats()>;
extern KernelSlot<ops::ConvBnStats (*)(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& w,
                                       const ops::Conv2dParams& p, const ConvFusionUnfused& unfused,
                                       ops::ConvFusionChoice* how)>
    conv_bn_stats_forward_kernel;

}  // namespace kiln
