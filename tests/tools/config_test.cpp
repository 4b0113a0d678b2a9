// Config file loading and command-line overrides.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "tools/config.h"

using namespace kiln;

static std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, OverridesShortFormsAndDottedPaths) {
  json c = json::parse(R"({"train": {"epochs": 10}, "optim": {"lr": 0.1},
                           "data": {"train_transforms": [{"type": "flip", "p": 0.5}]}})");
  apply_overrides(c, {"epochs=3", "batch=-1", "device=0,1", "lr=0.05", "optim.momentum=0.8",
                      "data.train_transforms.0.p=0.25", "precision=bf16", "train.checkpoint=\"blocks\""});
  EXPECT_EQ(c["train"]["epochs"], 3);
  EXPECT_EQ(c["data"]["batch_size"], -1);  // the global batch
  EXPECT_EQ(c["train"]["device"], "0,1");
  EXPECT_DOUBLE_EQ(c["optim"]["lr"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(c["optim"]["momentum"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(c["data"]["train_transforms"][0]["p"].get<double>(), 0.25);
  EXPECT_EQ(c["train"]["precision"], "bf16");
  EXPECT_EQ(c["train"]["checkpoint"], "blocks");
}

TEST(Config, BadOverridesNameTheArgument) {
  json c = json::parse(R"({"train": {"epochs": 10}, "data": {"train_transforms": []}})");
  EXPECT_NE(error_of([&] { apply_overrides(c, {"epochs"}); }).find("'epochs' is not key=value"), std::string::npos);
  EXPECT_NE(error_of([&] { apply_overrides(c, {"train.epochs.x=1"}); }).find("train.epochs holds an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_overrides(c, {"data.train_transforms.3.p=1"}); }).find("has 0 entries"),
            std::string::npos);
}

TEST(Config, FileErrorsNameTheFile) {
  EXPECT_NE(error_of([] { load_config_file("/nonexistent/x.json"); }).find("'/nonexistent/x.json' cannot be read"),
            std::string::npos);
  std::string p = ::testing::TempDir() + "bad.json";
  std::ofstream(p) << "{\"train\": {\"epochs\": 3,}}";
  std::string m = error_of([&] { load_config_file(p); });
  EXPECT_NE(m.find("is not valid JSON"), std::string::npos) << m;
  EXPECT_NE(m.find(p), std::string::npos) << m;
}
