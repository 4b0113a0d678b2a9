// Held-out validation splits (data.holdout): the two parts are disjoint, cover the training files, are
// the same on every call and differ by seed; the config checks the count and writes it back.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/check.h"
#include "data/config.h"
#include "data/holdout.h"
#include "data_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;

namespace {
Json synthetic_config(int64_t holdout, uint64_t seed = 0) {
  return Json{{"source", "synthetic"},
              {"synthetic", {{"size", 100}, {"height", 4}, {"width", 4}, {"channels", 1}, {"num_classes", 3}}},
              {"holdout", holdout},
              {"holdout_seed", seed}};
}
}  // namespace

TEST(Holdout, PartsAreDisjointSortedAndCoverTheTrainingSet) {
  auto val = holdout_indices(1000, 150, 7, Split::val), train = holdout_indices(1000, 150, 7, Split::train);
  EXPECT_EQ(val.size(), 150u);
  EXPECT_EQ(train.size(), 850u);
  EXPECT_TRUE(std::is_sorted(val.begin(), val.end()));
  EXPECT_TRUE(std::is_sorted(train.begin(), train.end()));
  std::set<int64_t> all(val.begin(), val.end());
  all.insert(train.begin(), train.end());
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), 999);
  // Not a block at either end: a seeded draw over the whole set.
  EXPECT_LT(val.front(), 100);
  EXPECT_GT(val.back(), 900);
}

TEST(Holdout, SameForASeedAndDifferentAcrossSeeds) {
  EXPECT_EQ(holdout_indices(500, 50, 0, Split::val), holdout_indices(500, 50, 0, Split::val));
  EXPECT_NE(holdout_indices(500, 50, 0, Split::val), holdout_indices(500, 50, 1, Split::val));
  // Fixed values: the choice must not change between versions, or a tuning run's held-out images
  // would leak into the next version's training part.
  EXPECT_EQ(holdout_indices(10, 3, 0, Split::val), (std::vector<int64_t>{1, 3, 8}));
  EXPECT_EQ(holdout_indices(10, 3, 0, Split::train), (std::vector<int64_t>{0, 2, 4, 5, 6, 7, 9}));
}

TEST(Holdout, ConfigMakesBothSplitsFromTheTrainingFiles) {
  DataConfig c = DataConfig::from_json(synthetic_config(20, 3));
  EXPECT_EQ(c.holdout, 20);
  auto train = make_dataset(c, Split::train), val = make_dataset(c, Split::val);
  EXPECT_EQ(train->size(), 80);
  EXPECT_EQ(val->size(), 20);
  EXPECT_EQ(val->num_classes(), 3);
  EXPECT_HAS(val->name(), "synthetic train [holdout val: 20 of 100]");
  EXPECT_HAS(train->name(), "synthetic train [holdout train: 80 of 100]");
  // Each held-out sample is the training file's sample at the chosen index.
  DataConfig plain = DataConfig::from_json(synthetic_config(0));
  auto full = make_dataset(plain, Split::train);
  auto idx = holdout_indices(100, 20, 3, Split::val);
  for (int64_t k = 0; k < 20; ++k) {
    Sample a = val->get(k), b = full->get(idx[static_cast<size_t>(k)]);
    EXPECT_EQ(a.label, b.label);
    EXPECT_TRUE(std::equal(a.image.data(), a.image.data() + a.image.numel(), b.image.data()));
  }
  EXPECT_EQ(DataConfig::from_json(c.to_json()).to_json(), c.to_json());
  EXPECT_FALSE(plain.to_json().contains("holdout"));
}

TEST(Holdout, RefusesCountsThatLeaveNothing) {
  EXPECT_HAS(kt::error_of([] { DataConfig::from_json(synthetic_config(-1)); }),
             "data.holdout: the number of training images held out as the validation split");
  DataConfig c = DataConfig::from_json(synthetic_config(100));
  EXPECT_HAS(kt::error_of([&] { make_dataset(c, Split::val); }),
             "data.holdout: 100 images cannot be held out of the 100 of synthetic train; accepted: 1 to 99 (0 = none)");
  EXPECT_HAS(kt::error_of([] { holdout_indices(5, 0, 0, Split::val); }), "accepted: 1 to 4");
}
