// Test helper: a run interrupted after its first epoch and resumed, against the same run uninterrupted
// (the trainer's exact-resume contract, which each feature that keeps state across epochs must keep).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/io/safetensors.h"
#include "tools/deploy/config.h"
#include "tools/engine/trainer.h"

namespace kiln::testing {

inline void expect_same_epoch_rows(const std::string& straight_dir, const std::string& run_dir);

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
  expect_same_epoch_rows(r.straight.run_dir, r.resumed.run_dir);  // the resumed run's log tells the same
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

// The "kind": "epoch" rows of a run folder's metrics.jsonl, in order.
inline std::vector<json> epoch_rows(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("kind", "") == "epoch") rows.push_back(j);
  }
  return rows;
}

// The two runs' epoch rows say the same of every epoch (one row each, no duplicates): the figures
// that do not depend on the clock (epoch, step, lr, the training loss and accuracy, the evaluation's).
inline void expect_same_epoch_rows(const std::string& straight_dir, const std::string& run_dir) {
  const std::vector<json> a = epoch_rows(straight_dir), b = epoch_rows(run_dir);
  ASSERT_EQ(a.size(), b.size()) << straight_dir << " vs " << run_dir;
  for (size_t i = 0; i < a.size(); ++i)
    for (const char* k : {"epoch", "step", "lr", "train_loss", "train_acc", "val_loss", "val_top1", "val_top5"}) {
      ASSERT_TRUE(a[i].contains(k) && b[i].contains(k)) << "row " << i << ": " << k;
      EXPECT_EQ(a[i][k].dump(), b[i][k].dump()) << "epoch row " << i + 1 << ", " << k << ": " << straight_dir << " vs "
                                                << run_dir;
    }
}

}  // namespace kiln::testing
