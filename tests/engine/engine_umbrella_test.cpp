// <kiln/engine.h> alone (this file's first include): the base umbrella plus kiln::train's API, enough
// to prepare and train a config from a program (cmake/engine.h).
#include <kiln/engine.h>

#include <gtest/gtest.h>

#include <string>
#include <type_traits>

TEST(EngineUmbrella, TrainingConfigThroughTheUmbrella) {
  const std::string file = std::string(KILN_SOURCE_DIR) + "/configs/fashion_mnist_cnn.json";
  const kiln::json cfg = kiln::training_config(kiln::json(file), {"epochs=2", "optim.lr=0.02"});
  EXPECT_EQ(cfg["train"]["epochs"], 2);
  EXPECT_EQ(cfg["optim"]["lr"], 0.02);
  // A model built in code and the engine's result type are both reachable through it.
  static_assert(std::is_base_of_v<kiln::Module, kiln::Sequential>);
  kiln::TrainResult r;
  EXPECT_EQ(r.interrupted, 0);
}
