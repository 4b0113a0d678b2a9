// Inputs found by the fuzz targets of fuzz/ (docs/testing.md) that once escaped as something other
// than a kiln::Error naming the input; each is also a seed in fuzz/corpus/config/.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/expect_error.h"
#include "tools/config.h"

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
