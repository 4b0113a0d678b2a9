#include "layers/init.h"

#include <cmath>

#include "core/rng.h"

namespace kiln::init {

int64_t fan_in(const Shape& w) {
  KILN_CHECK(w.size() >= 2, "fan_in of a weight of shape ", shape_str(w), " (needs 2 or more dims)");
  int64_t n = 1;
  for (size_t i = 1; i < w.size(); ++i) n *= w[i];
  return n;
}

int64_t fan_out(const Shape& w) {
  KILN_CHECK(w.size() >= 2, "fan_out of a weight of shape ", shape_str(w), " (needs 2 or more dims)");
  int64_t n = w[0];
  for (size_t i = 1; i + 1 < w.size(); ++i) n *= w[i];  // out * kh * kw: every dim but the input one
  return n;
}

namespace {
thread_local bool t_skip = false;
}  // namespace

SkipInitGuard::SkipInitGuard() : prev_(t_skip) { t_skip = true; }
SkipInitGuard::~SkipInitGuard() { t_skip = prev_; }

Tensor uniform(const Shape& shape, double bound) {
  return t_skip ? Tensor::zeros(shape) : rand_uniform(shape, -bound, bound);
}
Tensor normal(const Shape& shape, double std) { return t_skip ? Tensor::zeros(shape) : rand_normal(shape, 0.0, std); }

Tensor torch_default_weight(const Shape& shape) {
  // kaiming_uniform_(a=sqrt(5)): gain = sqrt(2 / (1 + 5)), bound = gain * sqrt(3 / fan_in) = 1/sqrt(fan_in).
  return uniform(shape, 1.0 / std::sqrt(static_cast<double>(fan_in(shape))));
}

Tensor torch_default_bias(int64_t n, int64_t fan_in) {
  return uniform({n}, fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0);
}

Tensor kaiming_normal_fan_out(const Shape& shape) {
  return normal(shape, std::sqrt(2.0 / static_cast<double>(fan_out(shape))));
}

}  // namespace kiln::init
