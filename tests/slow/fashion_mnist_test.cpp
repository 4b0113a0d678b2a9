// End to end (label `slow`): the default config trains on part of Fashion-MNIST and the test
// accuracy is far above chance (10%). Skips where Debian's dataset-fashion-mnist is not installed.
#include <gtest/gtest.h>

#include <filesystem>

#include "tools/deploy/config.h"
#include "tools/engine/trainer.h"

using namespace kiln;

TEST(EndToEnd, DefaultConfigLearnsFashionMnist) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  json cfg = load_config_file(std::string(KILN_SOURCE_DIR) + "/configs/fashion_mnist_cnn.json");
  std::string runs = ::testing::TempDir() + "kiln_e2e_runs";
  std::filesystem::remove_all(runs);
  apply_overrides(cfg, {"epochs=1", "train.max_steps_per_epoch=300", "train.runs_dir=" + runs, "train.plots=true"});
  TrainResult r = train(cfg, /*quiet=*/true);
  EXPECT_GT(r.val_top1, 0.75) << "top-1 after 300 steps of 64";
  EXPECT_GT(r.val_top5, 0.97);
  EXPECT_LT(r.val_loss, 0.8);
  for (const char* f : {"loss.png", "accuracy.png", "lr.png", "best.safetensors"})
    EXPECT_TRUE(std::filesystem::exists(r.run_dir + "/" + f)) << f;
}
