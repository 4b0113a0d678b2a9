// scale_add_relu on the CPU (the kernels of core/ops/scale_add_relu.h's slots), f32 NHWC: one pass
// over the activations forward, one backward. Parallel over the samples.
// Tests: tests/core/scale_add_relu_test.cpp.
#include <cmath>
#include <vector>

#include "core/ops/scale_add_relu.h"

namespace kiln::cpu {

Tensor scale_add_relu_forward(const Tensor& x, const Tensor& scale, const Tensor& residual) {
  const int64_t n = x.size(0), pixels = x.size(1) * x.size(2), c = x.size(3);
  Tensor y = Tensor::empty(x.shape(), DType::f32);
  const float* xp = x.data<float>();
  const float* sp = scale.data<float>();
  const float* rp = residual.data<float>();
  float* yp = y.data<float>();
#pragma omp parallel for schedule(static) if (n > 1 && x.numel() > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const float* s = sp + i * c;
    for (int64_t p = 0; p < pixels; ++p) {
      const int64_t base = (i * pixels + p) * c;
      for (int64_t k = 0; k < c; ++k) {
        const float v = xp[base + k] * s[k] + rp[base + k];
        yp[base + k] = v < 0.0f ? 0.0f : v;  // NaN stays NaN (relu's rule)
      }
    }
  }
  return y;
}

ScaleAddReluGrads scale_add_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x,
                                          const Tensor& scale) {
  KILN_CHECK(grad_out.shape() == x.shape() && grad_out.dtype() == DType::f32, "scale_add_relu: the gradient ",
             grad_out.str(), " does not match x ", x.str());
  const int64_t n = x.size(0), pixels = x.size(1) * x.size(2), c = x.size(3);
  ScaleAddReluGrads g{Tensor::empty(x.shape(), DType::f32), Tensor::empty(scale.shape(), DType::f32),
                      Tensor::empty(x.shape(), DType::f32)};
  const float* gp = grad_out.data<float>();
  const float* yp = y.data<float>();
  const float* xp = x.data<float>();
  const float* sp = scale.data<float>();
  float* dxp = g.x.data<float>();
  float* dsp = g.scale.data<float>();
  float* drp = g.residual.data<float>();
#pragma omp parallel for schedule(static) if (n > 1 && x.numel() > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const float* s = sp + i * c;
    std::vector<double> ds(static_cast<size_t>(c), 0.0);
    std::vector<float> row(static_cast<size_t>(c));
    for (int64_t p = 0; p < pixels; ++p) {
      const int64_t base = (i * pixels + p) * c;
      for (int64_t k = 0; k < c; ++k) {
        const float m = yp[base + k] <= 0.0f ? 0.0f : gp[base + k];  // y NaN passes the gradient
        drp[base + k] = m;
        dxp[base + k] = m * s[k];
        row[static_cast<size_t>(k)] = m * xp[base + k];
      }
      for (int64_t k = 0; k < c; ++k) ds[static_cast<size_t>(k)] += row[static_cast<size_t>(k)];
    }
    for (int64_t k = 0; k < c; ++k) dsp[i * c + k] = static_cast<float>(ds[static_cast<size_t>(k)]);
  }
  return g;
}

}  // namespace kiln::cpu
