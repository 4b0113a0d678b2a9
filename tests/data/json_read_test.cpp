// JSON helpers: edit distance, suggestions, typed reads with path-naming errors, unknown keys.
#include <gtest/gtest.h>

#include <limits>

#include "core/check.h"
#include "core/json_util.h"
#include "data/augment.h"
#include "data/loader.h"
#include "data_test_util.h"

using namespace kiln;

using kiln::testing::error_of;

TEST(JsonUtil, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("", "ab"), 2u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("padding", "paddnig"), 1u);  // a swap of neighbours is one edit
  EXPECT_EQ(edit_distance("workers", "workres"), 1u);
  EXPECT_EQ(edit_distance("abc", "ca"), 3u);             // optimal string alignment, not full Damerau
  EXPECT_EQ(edit_distance("flaw", "lawn"), 2u);
}

TEST(JsonUtil, ClosestMatch) {
  std::vector<std::string> keys = {"batch_size", "shuffle", "workers", "prefetch", "seed", "p", "size"};
  EXPECT_EQ(closest_match("workres", keys), "workers");
  EXPECT_EQ(closest_match("Workers", keys), "workers");
  EXPECT_EQ(closest_match("batch", keys), "batch_size");      // a prefix
  EXPECT_EQ(closest_match("batchsize", keys), "batch_size");
  EXPECT_EQ(closest_match("sed", keys), "seed");
  EXPECT_EQ(closest_match("learning_rate", keys), "");        // nothing close
  EXPECT_EQ(closest_match("q", keys), "p");
  EXPECT_EQ(closest_match("xyz", keys), "");
}

TEST(JsonUtil, TypedReadsNameThePath) {
  int64_t i = 0;
  json_read(Json(5), "a", i);
  EXPECT_EQ(i, 5);
  json_read(Json(6.0), "a", i);  // an integer written as a float
  EXPECT_EQ(i, 6);
  EXPECT_HAS(error_of([&] { json_read(Json(2.5), "x.y", i); }), "x.y must be an integer, not a number 2.5");
  EXPECT_HAS(error_of([&] { json_read(Json(true), "x", i); }), "x must be an integer, not a boolean true");
  int small = 0;
  EXPECT_HAS(error_of([&] { json_read(Json(int64_t{1} << 40), "x", small); }), "x = 1099511627776 is out of range; accepted: 32-bit integers");
  uint64_t u = 0;
  json_read(Json(uint64_t{18446744073709551615ull}), "s", u);
  EXPECT_EQ(u, 18446744073709551615ull);
  EXPECT_HAS(error_of([&] { json_read(Json(-1), "s", u); }), "s = -1 is out of range; accepted: non-negative integers");
  double d = 0;
  json_read(Json(3), "d", d);
  EXPECT_EQ(d, 3.0);
  EXPECT_HAS(error_of([&] { json_read(Json("3"), "d", d); }), "d must be a number, not a string \"3\"");
  std::vector<double> v;
  json_read(Json(0.5), "v", v);
  EXPECT_EQ(v, std::vector<double>{0.5});
  json_read(Json{1, 2.5}, "v", v);
  EXPECT_EQ(v, (std::vector<double>{1.0, 2.5}));
  EXPECT_HAS(error_of([&] { json_read(Json{1, "a"}, "m.mean", v); }), "m.mean[1] must be a number");
  bool b = false;
  EXPECT_HAS(error_of([&] { json_read(Json(1), "flag", b); }), "flag must be true or false");
  std::string s;
  EXPECT_HAS(error_of([&] { json_read(Json(1), "name", s); }), "name must be a string");
  EXPECT_EQ(json_path("", "a"), "a");
  EXPECT_EQ(json_path("a.b", 3), "a.b[3]");
}

TEST(JsonUtil, ObjectReader) {
  Json j = {{"size", 3}, {"padding", 1}, {"type", "x"}};
  JsonReader r(j, "t[0]");
  int64_t size = 0, padding = 0, fill = 9;
  r.require("size", size);
  EXPECT_TRUE(r.read("padding", padding));
  EXPECT_FALSE(r.read("fill", fill));
  EXPECT_EQ(fill, 9);  // absent: default kept
  EXPECT_HAS(error_of([&] { r.finish(); }), "unknown key t[0].type");
  r.allow("type");
  r.finish();
  EXPECT_HAS(error_of([&] { r.require("mode", size); }), "t[0].mode is required");

  Json null;
  JsonReader empty(null, "opt");  // null reads as {}
  EXPECT_FALSE(empty.read("a", size));
  empty.finish();
  Json list = {1, 2};
  EXPECT_HAS(error_of([&] { JsonReader(list, "opt"); }), "opt must be an object, not a list [1,2]");
  EXPECT_HAS(error_of([] { check_choice("edg", {"constant", "edge"}, "m"); }),
             "value 'edg' at m (did you mean 'edge'?); accepted: constant, edge");
  EXPECT_HAS(error_of([] { check_choice("zzz", {"constant", "edge"}, "m"); }), "value 'zzz' at m; accepted: constant, edge");
}

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
