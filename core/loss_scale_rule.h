// The fp16 loss scaler's update rule (torch.cuda.amp.GradScaler's, plus a floor), written once for
// the host (optim/loss_scaler.cpp, which keeps the state itself) and for the kernels that keep it on
// the device so that a GPU step never reads it back (core/cpu/grad_utils.cpp,
// core/cuda/optim_cuda.cu). The state is four doubles; the counts stay exact below 2^53.
#pragma once
#include <cstdint>

#ifndef KILN_HOST_DEVICE  // as core/rng.h defines it
#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
#endif

namespace kiln {

struct LossScaleRule {
  double growth_factor = 2.0;   // after growth_interval finite iterations in a row
  double backoff_factor = 0.5;  // after a non-finite iteration
  double min_scale = 1.0;       // the scale never backs off below this
  int64_t growth_interval = 2000;
};

// state[0] scale, [1] finite iterations since the last change, [2] non-finite iterations in a row,
// [3] non-finite iterations in total.
enum LossScaleState { kScale = 0, kGrowthTracker = 1, kConsecutiveNonfinite = 2, kSkipped = 3, kLossScaleStateSize = 4 };

// One iteration's update: a non-finite one backs the scale off (never below min_scale) and counts a
// skip; growth_interval finite ones in a row multiply it by growth_factor (unless that overflows).
KILN_HOST_DEVICE inline void apply_loss_scale_rule(double* state, bool found_inf, const LossScaleRule& r) {
  if (found_inf) {
    state[kSkipped] += 1;
    state[kConsecutiveNonfinite] += 1;
    state[kGrowthTracker] = 0;
    const double backed = state[kScale] * r.backoff_factor;
    state[kScale] = backed > r.min_scale ? backed : r.min_scale;
    return;
  }
  state[kConsecutiveNonfinite] = 0;
  state[kGrowthTracker] += 1;
  if (state[kGrowthTracker] >= static_cast<double>(r.growth_interval)) {
    const double grown = state[kScale] * r.growth_factor;
    if (grown - grown == 0) state[kScale] = grown;  // finite (inf - inf and NaN - NaN are NaN)
    state[kGrowthTracker] = 0;
  }
}

}  // namespace kiln
