// Inputs found by the fuzz targets of fuzz/ (docs/testing.md) that once escaped as something other
// than a kiln::Error naming the input; each is also a seed in fuzz/corpus/config/.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/expect_error.h"
#include "tools/deploy/config.h"
#include "tools/engine/trainer.h"

using kiln::testing::expect_error;

// fuzz/config: `lr=1e400` escaped as nlohmann's out_of_range.406 "number overflow", naming neither
// the argument nor the file.
TEST(ConfigFuzz, NumberBeyondDoubleInAnOverrideNamesTheArgument) {
  kiln::json c = kiln::json::parse(R"({"optim": {"lr": 0.1}})");
  expect_error([&] { kiln::apply_overrides(c, {"lr=1e400"}); }, {"argument 'lr=1e400'", "out of range"});
  expect_error([&] { kiln::apply_overrides(c, {"optim.momentum=-2e999"}); }, {"'optim.momentum=-2e999'"});
}

TEST(ConfigFuzz, NumberBeyondDoubleInTheFileNamesTheFile) {
  std::string p = ::testing::TempDir() + "fuzz_big_number.json";
  std::ofstream(p) << R"({"optim": {"lr": 1e400}})";
  expect_error([&] { kiln::load_config_file(p); }, {p, "out of range"});
}

// fuzz/config: `"epochs": 1e30` was cast to int64 unchecked (UBSan: 1e+30 is outside the range of
// 'long'), and an unsigned seed above INT64_MAX wrapped to a negative number before the range check.
TEST(ConfigFuzz, IntegerFieldsAreRangeCheckedBeforeConversion) {
  using kiln::json;
  using kiln::TrainOptions;
  expect_error([] { TrainOptions::from_json(json::parse(R"({"epochs": 1e30})")); },
               {"train.epochs = 1e+30 is out of range", "accepted: 1..100000"});
  expect_error([] { TrainOptions::from_json(json::parse(R"({"seed": 9223372036854775808})")); },
               {"train.seed = 9223372036854775808 is out of range", "accepted: 0..9223372036854775807"});
  expect_error([] { TrainOptions::from_json(json::parse(R"({"log_every": -1e300})")); }, {"train.log_every = -1e+300"});
  EXPECT_EQ(TrainOptions::from_json(json::parse(R"({"seed": 9223372036854775807, "epochs": 3.0})")).seed, INT64_MAX);
}

// The same for integer lists (schedule milestones): 18446744073709551615 was read as -1.
TEST(ConfigFuzz, IntegerListEntriesAboveInt64AreRefused) {
  kiln::json j = kiln::json::parse(R"({"milestones": [1, 18446744073709551615]})");
  kiln::JsonReader r(j, "schedule");
  expect_error([&] { r.get_ints("milestones", {}); }, {"schedule.milestones[1] = 18446744073709551615 is out of range"});
}

// fuzz/config: an override with bytes that are not UTF-8 (`device=0,1<B7>`) was stored as a string,
// and the config's JSON dump (config.json, error messages) then threw nlohmann's type_error.316.
TEST(ConfigFuzz, OverrideThatIsNotUtf8IsRefused) {
  kiln::json c = kiln::json::object();
  expect_error([&] { kiln::apply_overrides(c, {"device=0,1\xb7\xb3"}); }, {"argument 'device=0,1", "not valid UTF-8"});
  kiln::apply_overrides(c, {"name=r\xc3\xa9sum\xc3\xa9"});  // UTF-8 is fine
  EXPECT_EQ(c["name"], "r\xc3\xa9sum\xc3\xa9");
}
