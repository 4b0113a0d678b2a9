// Test helper: a run interrupted after its first epoch and resumed, against the same run uninterrupted
// (the trainer's exact-resume contract, which each feature that keeps state across epochs must keep).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/io/safetensors.h"
#include "tools/deploy/config.h"
#include "tools/engine/trainer.h"

namespace kiln::testing {

struct ResumedRuns {
  TrainResult straight;  // config("straight"), uninterrupted
  TrainResult resumed;   // config("split") stopped after epoch 1 (train.stop_after=1), then resumed
};

inline ResumedRuns train_straight_and_resumed(const std::function<json(const std::string&)>& config) {
  ResumedRuns r;
  r.straight = train(config("straight"), /*quiet=*/true);
  json first = config("split");
  apply_overrides(first, {"train.stop_after=1"});
  const TrainResult interrupted = train(first, true);
  json second = config("split");
  apply_overrides(second, {"resume=" + interrupted.run_dir});
  r.resumed = train(second, true);
  return r;
}

// Every tensor of `file` (e.g. "last.safetensors") is bit-identical in the two run folders.
inline void expect_same_tensors(const std::string& dir_a, const std::string& dir_b, const std::string& file) {
  auto a = load_safetensors(dir_a + "/" + file).tensors;
  auto b = load_safetensors(dir_b + "/" + file).tensors;
  ASSERT_EQ(a.size(), b.size()) << file;
  for (auto& [name, t] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << file << ": " << name;
    EXPECT_EQ(t.to_double_vector(), it->second.to_double_vector()) << file << ": " << name;
  }
}

}  // namespace kiln::testing
