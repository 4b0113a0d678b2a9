#include "core/rng.h"

#include <cmath>

namespace kiln {

Generator& default_generator() {
  thread_local Generator gen(0);
  return gen;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

Tensor rand_uniform(const Shape& shape, double lo, double hi, DType dtype, Device device, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  Tensor t = Tensor::empty(shape, DType::f32);
  int64_t n = t.numel();
  RngState s = g.advance(static_cast<uint64_t>(n));
  float* p = t.data<float>();
  float flo = static_cast<float>(lo), span = static_cast<float>(hi - lo);
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) p[i] = flo + span * uniform_at(s, static_cast<uint64_t>(i));
  return (dtype == DType::f32 ? t : t.to(dtype)).to(device);
}

Tensor rand_normal(const Shape& shape, double mean, double std, DType dtype, Device device, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  Tensor t = Tensor::empty(shape, DType::f32);
  int64_t n = t.numel();
  RngState s = g.advance(2 * static_cast<uint64_t>(n));
  float* p = t.data<float>();
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {  // Box-Muller on two independent counters
    double u1 = (uniform_at(s, 2 * static_cast<uint64_t>(i)) * 16777216.0 + 0.5) / 16777216.0;  // (0, 1)
    double u2 = uniform_at(s, 2 * static_cast<uint64_t>(i) + 1);
    p[i] = static_cast<float>(mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  return (dtype == DType::f32 ? t : t.to(dtype)).to(device);
}

}  // namespace kiln
