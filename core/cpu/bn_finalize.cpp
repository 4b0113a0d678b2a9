// The kernels of ops::bn_finalize on the CPU (core/ops/bn_finalize.h): one loop over the channels,
// the shared f64 formulas of that header, rounded once per output. Tests: tests/core/bn_finalize_test.cpp.
#include "core/ops/bn_finalize.h"

namespace kiln::cpu {

BnFinalizeForward bn_finalize_forward(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma,
                                      const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                      double momentum, double eps, DType out) {
  const int64_t C = sum.shape()[0];
  Tensor sb = Tensor::empty({2, C}, DType::f32), saved = Tensor::empty({3, C}, DType::f32);
  const float* s = sum.data<float>();
  const float* q = sumsq.data<float>();
  const float* g = gamma.defined() ? gamma.data<float>() : nullptr;
  const float* b = beta.defined() ? beta.data<float>() : nullptr;
  float* rm = running_mean.defined() ? running_mean.data<float>() : nullptr;
  float* rv = running_var.defined() ? running_var.data<float>() : nullptr;
  float* o = sb.data<float>();
  float* sv = saved.data<float>();
  const double n = static_cast<double>(count);
  for (int64_t c = 0; c < C; ++c) {
    const BnFinalizeChannel f = bn_finalize_channel(s[c], q[c], n, g ? g[c] : 1.0, b ? b[c] : 0.0, eps);
    o[c] = static_cast<float>(f.scale);
    o[C + c] = static_cast<float>(f.bias);
    sv[c] = static_cast<float>(f.mean);
    sv[C + c] = static_cast<float>(f.invstd);
    sv[2 * C + c] = static_cast<float>(f.var);
    if (rm) bn_finalize_running(&rm[c], &rv[c], f, n, momentum);
  }
  return {out == DType::f32 ? sb : sb.to(out).detach(), saved};
}

Tensor bn_finalize_backward(const Tensor& grad, const Tensor& saved, const Tensor& gamma, int64_t count) {
  const int64_t C = saved.shape()[1];
  Tensor r = Tensor::empty({4, C}, DType::f32);
  const float* gs = grad.data<float>();
  const float* sv = saved.data<float>();
  const float* g = gamma.defined() ? gamma.data<float>() : nullptr;
  float* o = r.data<float>();
  const double n = static_cast<double>(count);
  for (int64_t c = 0; c < C; ++c) {
    const BnFinalizeGrads d =
        bn_finalize_channel_backward(gs[c], gs[C + c], sv[c], sv[C + c], sv[2 * C + c], g ? g[c] : 1.0, n);
    o[c] = static_cast<float>(d.sum);
    o[C + c] = static_cast<float>(d.sumsq);
    o[2 * C + c] = static_cast<float>(d.gamma);
    o[3 * C + c] = static_cast<float>(d.beta);
  }
  return r;
}

}  // namespace kiln::cpu
