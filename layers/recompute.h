// Gradient checkpointing, i.e. activation recomputation (named "recompute" in kiln's files so that
// "checkpoint" means saved training state, tools/deploy/checkpoint.h), of a chain of modules ("units":
// residual blocks, VGG/AlexNet stages).
// A model's `checkpoint` option:
//   "none"     every unit runs normally (default)
//   "blocks"   each unit runs through kiln::checkpoint (core/autograd.h): its activations are freed
//              after forward and recomputed in backward
//   "every:K"  K consecutive units form one checkpointed segment
// The last segment is not checkpointed when there are several (backward begins with it: recomputing
// it would cost time and save no peak memory), as torch.utils.checkpoint_sequential does.
// Gradients equal the plain run; batch-norm running statistics are updated once (the recomputation
// skips them, layers/module.h is_recomputing()); dropout masks are replayed from the saved RNG state.
// Tests: tests/models/recompute_test.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"

namespace kiln {

struct RecomputePolicy {
  int64_t segment = 0;  // units per checkpointed segment; 0 = no checkpointing

  // Parses "none" | "blocks" | "every:K" (K >= 1); `path` names the config key in errors.
  static RecomputePolicy parse(const std::string& s, const std::string& path);
  std::string str() const;  // back to the config string
};

// A unit: modules that run one after the other (a residual block, or a stage ending in a pooling).
using Unit = std::vector<std::shared_ptr<Module>>;

// Splits a chain of layers into units: a unit ends after each pooling layer, residual block or
// nested sequential (so a VGG's `features` splits into its stages).
std::vector<Unit> split_units(const std::vector<std::shared_ptr<Module>>& layers);

// Runs x through `units` in order, grouping them into checkpointed segments as the policy says.
Tensor run_units(const std::vector<Unit>& units, const Tensor& x, const RecomputePolicy& policy);

}  // namespace kiln
