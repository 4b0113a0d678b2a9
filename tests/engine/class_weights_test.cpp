// Class weights (tools/engine/class_weights.h): "balanced" as sklearn computes it, counting an image
// folder's classes without decoding an image, a list resolved against the dataset, and the option's
// errors naming the key and what is accepted. Through the trainer: tests/engine/report_test.cpp
// (ReportTrainer.ClassWeightsReachTheLoss).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "data/image_decode.h"
#include "data/image_folder.h"
#include "tests/data/data_test_util.h"
#include "tools/engine/class_weights.h"

using namespace kiln;
using kiln::testing::error_of;
namespace fs = std::filesystem;

TEST(ClassWeights, BalancedIsSklearns) {
  // n / (K * count): 6 samples, 4 classes; a class without samples gets 0.
  EXPECT_EQ(balanced_class_weights({3, 1, 2, 0}), (std::vector<double>{0.5, 1.5, 0.75, 0.0}));
  EXPECT_EQ(balanced_class_weights({5, 5}), (std::vector<double>{1.0, 1.0}));
}

TEST(ClassWeights, BalancedOnAnImbalancedImageFolderReadsNoImage) {
  // 3, 1 and 2 "images" per class; the files are not images at all: counting must not decode them.
  kiln::testing::TempDir dir;
  const std::string root = dir.file("folder");
  const std::map<std::string, int> counts{{"ant", 3}, {"bee", 1}, {"cow", 2}};
  for (const auto& [cls, n] : counts) {
    fs::create_directories(root + "/" + cls);
    for (int i = 0; i < n; ++i) std::ofstream(root + "/" + cls + "/" + std::to_string(i) + ".png") << "not a png";
  }
  auto ds = ImageFileDataset::open_folder(root, DecodeOptions{}, "imbalanced");
  EXPECT_EQ(class_counts(*ds), (std::vector<int64_t>{3, 1, 2}));
  std::vector<double> w = resolve_class_weights("balanced", *ds, "train.class_weights");
  ASSERT_EQ(w.size(), 3u);
  EXPECT_DOUBLE_EQ(w[0], 6.0 / (3 * 3));
  EXPECT_DOUBLE_EQ(w[1], 6.0 / (3 * 1));
  EXPECT_DOUBLE_EQ(w[2], 6.0 / (3 * 2));
  EXPECT_EQ(resolve_class_weights(json::array({1, 2.5, 0}), *ds, "train.class_weights"),
            (std::vector<double>{1, 2.5, 0}));
  EXPECT_TRUE(resolve_class_weights(nullptr, *ds, "train.class_weights").empty());
  EXPECT_NE(error_of([&] { resolve_class_weights(json::array({1, 2}), *ds, "train.class_weights"); })
                .find("train.class_weights lists 2 weights, but imbalanced has 3 classes"),
            std::string::npos);
}

TEST(ClassWeights, BadOptionsNameTheKeyAndWhatIsAccepted) {
  struct Case {
    json option;
    std::string expect;
  };
  for (const Case& c : {Case{"balance", "train.class_weights = \"balance\" is not accepted; accepted: \"balanced\""},
                        Case{json::array({1, -1}), "train.class_weights[1] = -1 is not accepted"},
                        Case{json::array({1, "x"}), "train.class_weights[1] = \"x\""},
                        Case{json::array({0, 0}), "every weight is 0"},
                        Case{json::array(), "train.class_weights = [] is not accepted"},
                        Case{3, "train.class_weights = 3 is not accepted"}}) {
    std::string m = error_of([&] { check_class_weights_option(c.option, "train.class_weights"); });
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.option.dump() << " gave: " << m;
  }
  EXPECT_EQ(error_of([] { check_class_weights_option(json::array({0, 1e-3}), "k"); }), "");
}

