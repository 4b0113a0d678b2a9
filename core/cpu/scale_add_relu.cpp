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
  const float* __restrict xp = x.data<float>();
  const float* __restrict sp = scale.data<float>();
  const float* __restrict rp = residual.data<float>();
  float* __restrict yp = y.data<float>();
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

namespace {
// One sample's backward: m = gy where y > 0 or y is NaN, else 0; dresidual = m, dx = m * s, and
// ds += m * x over the pixels, summed in f32 over blocks of 64 pixels and the blocks in double (the
// inner loops stay simple enough to vectorise).
void backward_sample(const float* __restrict g, const float* __restrict y, const float* __restrict x,
                     const float* __restrict s, float* __restrict dx, float* __restrict dr, float* __restrict ds,
                     int64_t pixels, int64_t c) {
  std::vector<float> block(static_cast<size_t>(c), 0.0f);
  std::vector<double> total(static_cast<size_t>(c), 0.0);
  float* __restrict acc = block.data();
  for (int64_t p = 0; p < pixels; ++p) {
    const int64_t base = p * c;
    for (int64_t k = 0; k < c; ++k) {
      const float gv = g[base + k], yv = y[base + k];  // both loaded: a select, not a branch
      const float m = yv <= 0.0f ? 0.0f : gv;
      dr[base + k] = m;
      dx[base + k] = m * s[k];
      acc[k] += m * x[base + k];
    }
    if ((p + 1) % 64 == 0 || p + 1 == pixels)
      for (int64_t k = 0; k < c; ++k) total[static_cast<size_t>(k)] += acc[k], acc[k] = 0.0f;
  }
  for (int64_t k = 0; k < c; ++k) ds[k] = static_cast<float>(total[static_cast<size_t>(k)]);
}
}  // namespace

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
  const int64_t per = pixels * c;
#pragma omp parallel for schedule(static) if (n > 1 && x.numel() > 32768)
  for (int64_t i = 0; i < n; ++i)
    backward_sample(gp + i * per, yp + i * per, xp + i * per, sp + i * c, dxp + i * per, drp + i * per, dsp + i * c,
                    pixels, c);
  return g;
}

}  // namespace kiln::cpu
