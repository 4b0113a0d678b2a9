// The per-channel sums a training batch norm needs, sum(y) and sum(y*y) over every position of
// channels-last activations y (N, ..., C), recorded by autograd as ONE node whose backward is one pass
// over y: dy = g_sum[c] + 2 * y * g_sumsq[c] (f32 math, rounded once to y's dtype). The fused
// conv-BN path (core/ops/conv_fusion.h) takes its sums from cuDNN's epilogue and records them with
// record_channel_moments; a chain of public ops (sum of a broadcast, cast, mul, cast, and the engine's
// adds) would cost about nine passes over y in the backward, the gradient of every fused convolution.
// The op is core/ops/channel_moments.cpp; its backward kernel fills the slot below:
// core/cpu/channel_moments.cpp and core/cuda/channel_moments_cuda.cu.
// Tests: tests/core/channel_moments_test.cpp, tests/gpu/channel_moments_test.cpp.
#pragma once
#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln::ops {

struct ChannelMoments {
  Tensor sum, sumsq;  // (C) f32
};

// Computes the sums (of y's values as stored, accumulated in f32) and records them.
ChannelMoments channel_moments(const Tensor& y);
// Records sums already computed elsewhere (the fused kernel's): sum and sumsq must be (C) f32 tensors
// on y's device holding y's sums; they are not checked against y. Not recorded (returned as they
// are) when y needs no gradient.
ChannelMoments record_channel_moments(const Tensor& y, const Tensor& sum, const Tensor& sumsq);

}  // namespace kiln::ops

namespace kiln {

// --- the backward kernel (core/kernel_slot.h): y (N, ..., C) packed f32/f16/bf16 (f64 on the CPU);
// g_sum, g_sumsq (C) f32. Returns dy = g_sum[c] + 2 * y * g_sumsq[c] in y's dtype, computed in f32
// (f64 for f64 y) and rounded once.
extern KernelSlot<Tensor (*)(const Tensor& y, const Tensor& g_sum, const Tensor& g_sumsq)>
    channel_moments_backward_kernel;

}  // namespace kiln
