// Inverted dropout on the CPU. Element i of a call is kept iff uniform_at(state, i) >= p, where
// state = default_generator().advance(numel) is reserved by the call (core/rng.h): the mask is a pure
// function of {seed, offset, i}, independent of threads, and is never stored. Backward applies the
// same mask to dy by redrawing it from the saved state, so a dropout costs no activation memory and
// checkpointing (which restores the generator state) recomputes the identical mask.
// Tests: tests/core/dropout_test.cpp.
#include "core/ops/dropout.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/nn_util.h"
#include "core/rng.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

namespace kiln::ops {

namespace {

// out = in * (keep(i) ? scale : 0) for the mask of `state`, in the compute dtype of `in`. A multiply,
// as PyTorch does, not a select: a dropped NaN stays NaN.
Tensor apply_mask(const Tensor& in, RngState state, double p) {
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

Tensor dropout(const Tensor& x, double p, bool training) {
  const bool on_gpu = op_on_cuda("dropout", {x});
  nn::check_floating("dropout", "x", x);
  KILN_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p, " (x ", x.str(), ")");
  if (!training || p == 0 || x.numel() == 0) return x;
  RngState state = default_generator().advance(static_cast<uint64_t>(x.numel()));
  if (on_gpu) {  // the same counter-based mask, drawn on the device
#ifdef KILN_WITH_CUDA
    Tensor y = cuda::dropout_forward(x.detach(), p, state);
    return record("dropout", {x}, y, [state, p, dt = x.dtype()](const Tensor& gy) {
      return grads{cuda::dropout_backward(gy.dtype() == dt ? gy : gy.to(dt), p, state)};
    });
#endif
  }
  Tensor y = apply_mask(x, state, p);
  return record("dropout", {x}, y, [state, p, dt = x.dtype()](const Tensor& gy) {
    Tensor dx = apply_mask(gy, state, p);
    return grads{dx.dtype() == dt ? dx : dx.to(dt)};
  });
}

}  // namespace kiln::ops
