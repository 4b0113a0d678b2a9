// LARS with the poly schedule through the trainer: a run interrupted after its first epoch and
// resumed ends bit for bit where the uninterrupted run does (weights and the momentum buffers in
// the checkpoint). tests/optim/lars_test.cpp checks the update itself; the synthetic images here carry
// no learnable signal (SGD stays at chance too), so this test is about the state, not accuracy.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/resume_util.h"
#include "tests/tiny_net.h"

using namespace kiln;

TEST(LarsTraining, PolyScheduleTrainsAndResumesExactly) {
  const std::string runs = ::testing::TempDir() + "kiln_lars_resume";
  std::filesystem::remove_all(runs);
  auto config = [&](const std::string& name) {
    json c = json::parse(R"({
      "model": {},
      "data": {"source": "synthetic", "synthetic": {"size": 192, "height": 8, "width": 8, "channels": 3, "num_classes": 4},
               "batch_size": 32, "workers": 2},
      "optim": {"name": "lars", "lr": 5.0, "momentum": 0.9, "weight_decay": 5e-5, "eta": 0.01},
      "schedule": {"name": "poly", "warmup_epochs": 0.5, "warmup_start_factor": 0, "end_lr": 1e-3},
      "train": {"epochs": 3, "seed": 5, "plots": false, "label_smoothing": 0.1}
    })");
    c["model"]["layers"] = kiln::testing::tiny_conv_layers();
    c["name"] = name;
    c["train"]["runs_dir"] = runs;
    return c;
  };
  const kiln::testing::ResumedRuns r = kiln::testing::train_straight_and_resumed(config);
  EXPECT_EQ(r.resumed.steps, r.straight.steps);
  kiln::testing::expect_same_tensors(r.straight.run_dir, r.resumed.run_dir, "last.safetensors");
  kiln::testing::expect_same_tensors(r.straight.run_dir, r.resumed.run_dir, "last.state.safetensors");
  auto state = load_safetensors(r.straight.run_dir + "/last.state.safetensors").tensors;
  EXPECT_TRUE(state.count("0.weight.momentum_buffer")) << "the LARS buffers are in the checkpoint";
}
