// Options structs of data/ read through the JSON helpers (core/json_util.h): nlohmann conversions,
// numbers range-checked and named by their path.
#include <gtest/gtest.h>

#include <limits>

#include "core/check.h"
#include "core/json_reader.h"
#include "data/augment.h"
#include "data/loader.h"
#include "data_test_util.h"

using namespace kiln;

using kiln::testing::error_of;

TEST(JsonUtil, NlohmannConversionsOfOptions) {
  Json j = Json::parse(R"({"size": 24, "padding": 3})");
  auto crop = j.get<RandomCropOptions>();
  EXPECT_EQ(crop.size, 24);
  EXPECT_EQ(crop.padding, 3);
  Json back = crop;
  EXPECT_EQ(back, crop.to_json());
  EXPECT_THROW(Json::parse(R"({"size": 24, "pad": 3})").get<RandomCropOptions>(), Error);
  LoaderOptions lo = Json{{"workers", 5}}.get<LoaderOptions>();
  EXPECT_EQ(lo.workers, 5);
  EXPECT_EQ(Json(lo)["batch_size"], 64);
}

// JsonReader's fields (data, transforms, loader): integers range-checked before conversion,
// floats finite, each error naming the path.
TEST(JsonUtil, NumbersAreRangeCheckedAndNamed) {
  Json j = Json::parse(R"({"a": 18446744073709551616, "b": 1e30, "c": 3000000000, "d": -1, "e": 2.0,
                           "f": 18446744073709551615})");
  int64_t i64 = 0;
  int i32 = 0;
  uint64_t u64 = 0;
  std::string m = error_of([&] { json_read(j["a"], "data.seed", i64); });
  EXPECT_NE(m.find("data.seed = 1.8446744073709552e+19 is out of range; accepted: 64-bit integers"), std::string::npos) << m;
  m = error_of([&] { json_read(j["b"], "data.batch_size", i64); });
  EXPECT_NE(m.find("data.batch_size = 1e+30 is out of range"), std::string::npos) << m;
  m = error_of([&] { json_read(j["c"], "x.size", i32); });
  EXPECT_NE(m.find("x.size = 3000000000 is out of range; accepted: 32-bit integers"), std::string::npos) << m;
  m = error_of([&] { json_read(j["d"], "data.seed", u64); });
  EXPECT_NE(m.find("data.seed = -1 is out of range; accepted: non-negative integers"), std::string::npos) << m;
  m = error_of([&] { json_read(j["a"], "data.seed", u64); });
  EXPECT_NE(m.find("data.seed = 1.8446744073709552e+19 is out of range"), std::string::npos) << m;
  json_read(j["e"], "x", i32);
  EXPECT_EQ(i32, 2);
  json_read(j["f"], "x", u64);
  EXPECT_EQ(u64, 18446744073709551615ull);
  double d = 0;
  m = error_of([&] { json_read(Json(std::numeric_limits<double>::infinity()), "data.max_bad_fraction", d); });
  EXPECT_NE(m.find("data.max_bad_fraction"), std::string::npos) << m;
  EXPECT_NE(m.find("finite numbers"), std::string::npos) << m;
  // Through a whole options struct: the loader's batch_size.
  m = error_of([&] { LoaderOptions::from_json(Json::parse(R"({"batch_size": 1e30})")); });
  EXPECT_NE(m.find("loader.batch_size = 1e+30 is out of range"), std::string::npos) << m;
}
