// Optimizer and loss-scaler state survive a safetensors file (tensors in the file, scalars in its
// metadata as JSON), the way checkpoints store them, and training continues bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/io/safetensors.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim_test_util.h"

using namespace kiln;
using kiln::testing::make_param;
using kiln::testing::set_grad;
using kiln::testing::values;

TEST(CheckpointState, OptimizerAndScalerThroughSafetensors) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln_optim_state_" + std::to_string(::getpid()) + ".safetensors")).string();
  for (const char* config : {R"({"name": "sgd", "lr": 0.05, "nesterov": true, "weight_decay": 1e-3})",
                             R"({"name": "adamw", "lr": 0.01, "amsgrad": true})",
                             R"({"name": "lars", "lr": 2.0, "weight_decay": 1e-3, "eta": 0.01, "nesterov": true})"}) {
    auto grads = [](int t) { return std::vector<float>{0.1f * t, -0.2f, 0.05f * t * t, 1.0f / t}; };
    std::vector<ParamRef> a = {make_param("layer1.0.conv1.weight", {0.1f, 0.2f, -0.3f, 0.4f}, {1, 2, 2, 1})};
    auto opt_a = make_optimizer(json::parse(config), a);
    LossScaler scaler_a;
    for (int t = 1; t <= 3; ++t) {
      set_grad(a[0], grads(t));
      opt_a->step();
      scaler_a.update(t == 2);
    }
    OptimizerState st = opt_a->state_dict();
    save_safetensors(path, st.tensors,
                     {{"optimizer", st.type}, {"scalars", json(st.scalars).dump()}, {"loss_scaler", json(scaler_a.state_dict()).dump()}});

    auto b = kiln::testing::copy_params(a);
    auto opt_b = make_optimizer(json::parse(config), b);
    LossScaler scaler_b;
    SafetensorsContents file = load_safetensors(path);
    OptimizerState loaded{file.metadata.at("optimizer"), file.tensors,
                          json::parse(file.metadata.at("scalars")).get<std::map<std::string, double>>()};
    opt_b->load_state_dict(loaded);
    scaler_b.load_state_dict(json::parse(file.metadata.at("loss_scaler")).get<std::map<std::string, double>>());
    EXPECT_EQ(scaler_b.state_dict(), scaler_a.state_dict());
    for (int t = 4; t <= 6; ++t) {
      set_grad(a[0], grads(t));
      set_grad(b[0], grads(t));
      opt_a->step();
      opt_b->step();
    }
    EXPECT_EQ(values(a[0]), values(b[0])) << config;
  }
  std::filesystem::remove(path);
}
