// Inverted dropout: in training each element is kept with probability 1-p and scaled by 1/(1-p);
// in eval it is the identity. The mask is a pure function of the default generator's {seed, offset}
// (core/rng.h), so recomputation under gradient checkpointing draws the same mask.
// p must be in [0, 1); in eval, or with p = 0, x itself is returned and no random numbers are drawn.
// In training a call reserves numel(x) counters of the default generator (element i uses counter
// offset + i) and keeps element i iff uniform_at(state, i) >= p. Tests: tests/core/dropout_test.cpp.
#pragma once
#include "core/tensor.h"

namespace kiln::ops {

Tensor dropout(const Tensor& x, double p, bool training);

}  // namespace kiln::ops
