// Random numbers that do not depend on thread count or device: every draw is a pure function of
// (seed, offset + element index) (a counter-based generator, splitmix64 finaliser), and each draw
// advances the generator's offset by the number of elements. Saving and restoring {seed, offset}
// replays a draw exactly (gradient checkpointing recomputes dropout masks this way).
#pragma once
#include <cstdint>

#include "core/device.h"
#include "core/tensor.h"

// The counter-based generator below is compiled for the GPU too (dropout masks are identical).
#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln {

struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { state_.seed = seed; }
  void manual_seed(uint64_t seed) { state_ = {seed, 0}; }
  RngState state() const { return state_; }
  void set_state(RngState s) { state_ = s; }
  // Reserves `n` counters; returns the state to draw them from.
  RngState advance(uint64_t n) {
    RngState s = state_;
    state_.offset += n;
    return s;
  }

 private:
  RngState state_;
};

// The generator used by dropout and initialisers: one per thread (each data-parallel replica of a
// one-process, several-GPU run is a thread with its own stream of numbers), seeded 0 when the
// thread first uses it, reseeded by the trainer.
Generator& default_generator();
void manual_seed(uint64_t seed);

KILN_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Uniform in [0, 1) with 24 random bits, for counter i of state s.
KILN_HOST_DEVICE inline float uniform_at(RngState s, uint64_t i) {
  uint64_t h = mix64(s.seed * 0x2545f4914f6cdd1dull ^ mix64(s.offset + i));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

// Fresh tensors filled from the default generator (or `gen`).
Tensor rand_uniform(const Shape& shape, double lo, double hi, DType dtype = DType::f32,
                    Device device = Device::cpu(), Generator* gen = nullptr);
Tensor rand_normal(const Shape& shape, double mean, double std, DType dtype = DType::f32,
                   Device device = Device::cpu(), Generator* gen = nullptr);

}  // namespace kiln
