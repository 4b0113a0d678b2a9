// The trainer's per-step statistics as a kernel slot (core/kernel_slot.h), kept on the device so a
// step needs no host read (tools/engine/trainer.cpp reads acc at log intervals). Kernels:
// core/cpu/step_stats.cpp, core/cuda/loss_cuda.cu. Tests: tests/core/device_functions_test.cpp
// (StepStats.*), tests/gpu/loss_test.cpp.
#pragma once
#include <cstdint>

#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln {

// acc: 5 f64 on the device, zeroed by the caller; loss: one f32; logits (N, K) floating; labels (N)
// i64. acc[0] += loss * weight when the loss is finite; acc[1] += the rows whose first maximum is
// at the label (rows holding NaN: unspecified, the loss is NaN then); acc[2] += 1 when the loss is
// not finite, and for the first such loss (acc[2] was 0) acc[3] = step, acc[4] = the loss.
extern KernelSlot<void (*)(const Tensor& acc, const Tensor& loss, const Tensor& logits, const Tensor& labels,
                           double weight, int64_t step)>
    accumulate_step_stats_kernel;

}  // namespace kiln
