// Helpers shared by the CPU kernels of the nn ops (batch_norm, pool, lrn, dropout, loss): dtype
// checks and the compute copies (the device dispatch is core/ops/dispatch.h). These kernels run in f64 for f64 tensors (so tests can check
// gradients to 1e-6) and in f32 for every other floating dtype (bf16/f16 are converted on entry and
// rounded back on exit: DESIGN.md keeps statistics, softmax and losses in f32).
// Private to core/ops; tests: tests/core/{batch_norm,pool,lrn,dropout,loss}_test.cpp.
#pragma once
#include "core/tensor.h"

namespace kiln::ops::nn {

inline void check_floating(const char* op, const char* what, const Tensor& t) {
  KILN_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating (f32, bf16, f16 or f64), got ", t.str());
}

inline DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// A detached, contiguous tensor in the compute dtype (no copy when `t` already is one).
inline Tensor to_compute(const Tensor& t, DType ct) {
  Tensor d = t.detach();
  if (d.dtype() != ct) d = d.to(ct);
  return d.contiguous();
}
inline Tensor to_compute(const Tensor& t) { return to_compute(t, compute_dtype(t.dtype())); }

// `t` (a fresh compute tensor) converted to `dtype`, detached.
inline Tensor from_compute(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.to(dtype).detach(); }

// Calls f(T{}) with T = double for f64 compute tensors and float otherwise.
template <typename F>
decltype(auto) dispatch_compute(DType ct, F&& f) {
  if (ct == DType::f64) return f(double{});
  return f(float{});
}

}  // namespace kiln::ops::nn
