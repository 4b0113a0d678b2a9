// JSON helpers (core/json_util.h): edit distance, suggestions, typed reads with path-naming errors,
// unknown keys. Options structs read through them: tests/data/options_json_test.cpp; the one options
// reader, JsonReader: tests/core/json_reader_test.cpp.
#include <gtest/gtest.h>

#include <limits>

#include "core/check.h"
#include "core/json_reader.h"
#include "tests/expect_error.h"

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

