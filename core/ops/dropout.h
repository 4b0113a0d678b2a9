// Inverted dropout: in training each element is kept with probability 1-p and scaled by 1/(1-p);
// in eval it is the identity. The mask is a pure function of the default generator's {seed, offset}
// (core/rng.h), so recomputation under gradient checkpointing draws the same mask.
// p must be in [0, 1); in eval, or with p = 0, x itself is returned and no random numbers are drawn.
// In training a call reserves numel(x) counters of the default generator (element i uses counter
// offset + i) and keeps element i iff uniform_at(state, i) >= p. Tests: tests/core/dropout_test.cpp.
#pragma once
#include "core/kernel_slot.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace kiln::ops {

Tensor dropout(const Tensor& x, double p, bool training);

}  // namespace kiln::ops

namespace kiln {

// --- dropout's kernels (core/kernel_slot.h): element i (row-major) is kept iff
// uniform_at(state, i) >= float(p), kept values scaled by 1/(1-p) (a multiply: a dropped NaN stays
// NaN); the backward redraws the mask from the same state. Output dtype = input dtype.
extern KernelSlot<Tensor (*)(const Tensor& x, double p, RngState state)> dropout_forward_kernel;
extern KernelSlot<Tensor (*)(const Tensor& grad_out, double p, RngState state)> dropout_backward_kernel;

}  // namespace kiln
