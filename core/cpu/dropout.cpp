// Inverted dropout on the CPU (the kernels of core/ops/dropout.h's slots). Element i of a call is
// kept iff uniform_at(state, i) >= p, where state = default_generator().advance(numel) is reserved by
// the op (core/ops/dropout.cpp): the mask is a pure function of {seed, offset, i}, independent of
// threads, and is never stored. The backward applies the same mask to dy by redrawing it from the
// saved state, so a dropout costs no activation memory and checkpointing (which restores the
// generator state) recomputes the identical mask.
// Tests: tests/core/dropout_test.cpp.
#include "core/ops/dropout.h"
#include "core/ops/nn_util.h"

namespace kiln::cpu {

namespace {

// out = in * (keep(i) ? scale : 0) for the mask of `state`, in the compute dtype of `in`. A multiply,
// as PyTorch does, not a select: a dropped NaN stays NaN.
Tensor apply_mask(const Tensor& in, RngState state, double p) {
  namespace nn = ops::nn;
  DType ct = nn::compute_dtype(in.dtype());
  Tensor ic = nn::to_compute(in, ct);
  Tensor out = Tensor::empty(in.shape(), ct);
  int64_t n = in.numel();
  const float pf = static_cast<float>(p);
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    const T* a = ic.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) o[i] = a[i] * (uniform_at(state, static_cast<uint64_t>(i)) >= pf ? scale : T(0));
  });
  return nn::from_compute(out, in.dtype());
}

}  // namespace

Tensor dropout_forward(const Tensor& x, double p, RngState state) { return apply_mask(x, state, p); }
Tensor dropout_backward(const Tensor& grad_out, double p, RngState state) { return apply_mask(grad_out, state, p); }

}  // namespace kiln::cpu
