// Parameter initialisers as in torch.nn.init, drawing from the default generator (core/rng.h) so
// that manual_seed(s) before building a model reproduces it exactly. Weight layouts are kiln's:
// conv (out, kh, kw, in/groups), linear (out, in). Tests: tests/layers/layers_test.cpp.
#pragma once
#include "core/tensor.h"

namespace kiln::init {

// fan_in = in * kh * kw, fan_out = out * kh * kw (torch's definitions; for linear kh = kw = 1).
int64_t fan_in(const Shape& weight);
int64_t fan_out(const Shape& weight);

// U(-bound, bound).
Tensor uniform(const Shape& shape, double bound);
Tensor normal(const Shape& shape, double std);
// torch's default for Conv2d and Linear weights: kaiming_uniform_(a=sqrt(5)), i.e.
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)); their bias uses the same bound.
Tensor torch_default_weight(const Shape& shape);
Tensor torch_default_bias(int64_t n, int64_t fan_in);
// kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2/fan_out), as torchvision's ResNet and VGG.
Tensor kaiming_normal_fan_out(const Shape& shape);

// While one is alive (on this thread), the random initialisers above return zeros and draw nothing:
// for a model whose weights are loaded right after it is built (a VGG-16 draws 138M numbers
// otherwise), and for tests that look only at names and shapes.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln::init
