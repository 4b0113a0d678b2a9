// The kernels of ops::bn_finalize on the CPU (core/ops/bn_finalize.h): one loop over the channels,
// f64 math, rounded once per output. Tests: tests/core/conv_fusion_test.cpp (BnFinalize*).
#include <cmath>

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
    const double mean = s[c] / n;
    const double var = std::max(q[c] / n - mean * mean, 0.0);
    const double invstd = 1.0 / std::sqrt(var + eps);
    const double scale = (g ? g[c] : 1.0) * invstd;
    o[c] = static_cast<float>(scale);
    o[C + c] = static_cast<float>((b ? b[c] : 0.0) - mean * scale);
    sv[c] = static_cast<float>(mean);
    sv[C + c] = static_cast<float>(invstd);
    sv[2 * C + c] = static_cast<float>(var);
    if (rm) {
      rm[c] = static_cast<float>((1.0 - momentum) * rm[c] + momentum * mean);
      rv[c] = static_cast<float>((1.0 - momentum) * rv[c] + momentum * var * n / (n - 1.0));
    }
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
    const double g_scale = gs[c], g_bias = gs[C + c];
    const double mean = sv[c], invstd = sv[C + c], var = sv[2 * C + c], gamma_c = g ? g[c] : 1.0;
    const double g_scale_total = g_scale - g_bias * mean;  // bias = beta - mean * scale
    const double g_invstd = gamma_c * g_scale_total;
    const double g_var = var > 0 ? -0.5 * g_invstd * invstd * invstd * invstd : 0.0;
    const double g_mean = -g_bias * gamma_c * invstd - 2.0 * mean * g_var;
    o[c] = static_cast<float>(g_mean / n);                   // sum
    o[C + c] = static_cast<float>(g_var / n);                // sumsq
    o[2 * C + c] = static_cast<float>(invstd * g_scale_total);  // gamma
    o[3 * C + c] = static_cast<float>(g_bias);               // beta
  }
  return r;
}

}  // namespace kiln::cpu
