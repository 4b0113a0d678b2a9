#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "tests/expect_error.h"
#include "core/json_reader.h"

using namespace kiln;

using kiln::testing::error_of;

TEST(JsonReader, TypedGettersAndDefaults) {
  json j = json::parse(R"({"lr": 0.1, "epochs": 3, "nesterov": true, "name": "sgd", "milestones": [30, 60]})");
  JsonReader r(j, "optim");
  EXPECT_DOUBLE_EQ(r.get("lr", 0.5, 0.0, 10.0), 0.1);
  EXPECT_EQ(r.get("epochs", 1, 1, 1000), 3);
  EXPECT_TRUE(r.get("nesterov", false));
  EXPECT_EQ(r.get_choice("name", "adamw", {"sgd", "adamw"}), "sgd");
  EXPECT_EQ(r.get_ints("milestones", {}), (std::vector<int64_t>{30, 60}));
  EXPECT_DOUBLE_EQ(r.get("momentum", 0.9, 0.0, 1.0), 0.9);  // absent -> default
  r.finish();
}

TEST(JsonReader, ErrorsNamePathAndAccepted) {
  json j = json::parse(R"({"lr": "fast", "epochs": 0, "nestrov": true, "name": "sdg"})");
  JsonReader r(j, "optim");
  std::string m = error_of([&] { r.get("lr", 0.1, 0.0, 10.0); });
  EXPECT_NE(m.find("optim.lr must be a number"), std::string::npos) << m;
  m = error_of([&] { r.get("epochs", 1, 1, 1000); });
  EXPECT_NE(m.find("optim.epochs = 0 is out of range; accepted: 1..1000"), std::string::npos) << m;
  m = error_of([&] { r.get_choice("name", "sgd", {"sgd", "adamw"}); });
  EXPECT_NE(m.find("did you mean \"sgd\""), std::string::npos) << m;
  r.get("nesterov", false);
  m = error_of([&] { r.finish(); });
  EXPECT_NE(m.find("unknown key optim.nestrov (did you mean optim.nesterov?)"), std::string::npos) << m;
}

// Every integer is range-checked in its own type before conversion: 2^64 (parsed as a double),
// 1e30 and an unsigned above INT64_MAX used to wrap to -9223372036854775808 or a negative batch.
TEST(JsonReader, IntegersAreRangeCheckedBeforeConversion) {
  json j = json::parse(R"({"seed": 18446744073709551616, "batch": 1e30, "big": 18446744073709551615,
                           "neg": -1e19, "two": 2.0, "half": 2.5, "ints": [1, 18446744073709551615]})");
  JsonReader r(j, "train");
  std::string m = error_of([&] { r.get("seed", int64_t{0}, int64_t{0}, INT64_MAX); });
  EXPECT_NE(m.find("train.seed = 1.8446744073709552e+19 is out of range; accepted: 0..9223372036854775807"),
            std::string::npos) << m;
  m = error_of([&] { r.get("batch", int64_t{64}, int64_t{1}, INT64_MAX); });
  EXPECT_NE(m.find("train.batch = 1e+30 is out of range"), std::string::npos) << m;
  m = error_of([&] { r.get("big", int64_t{0}, int64_t{0}, INT64_MAX); });
  EXPECT_NE(m.find("train.big = 18446744073709551615 is out of range"), std::string::npos) << m;
  m = error_of([&] { r.get("neg", int64_t{0}, INT64_MIN, INT64_MAX); });
  EXPECT_NE(m.find("train.neg = -1e+19 is out of range"), std::string::npos) << m;
  EXPECT_EQ(r.get("two", 0, 0, 10), 2);
  m = error_of([&] { r.get("half", 0, 0, 10); });
  EXPECT_NE(m.find("train.half must be an integer"), std::string::npos) << m;
  m = error_of([&] { r.get_ints("ints", {}); });
  EXPECT_NE(m.find("train.ints[1] = 18446744073709551615 is out of range"), std::string::npos) << m;
}

TEST(JsonReader, FloatsMustBeFinite) {
  json j = {{"lr", std::numeric_limits<double>::infinity()}, {"mean", {0.5, std::nan("")}}};
  JsonReader r(j, "optim");
  std::string m = error_of([&] { r.get("lr", 0.1, 0.0, 1e300); });
  EXPECT_NE(m.find("optim.lr"), std::string::npos) << m;
  EXPECT_NE(m.find("out of range"), std::string::npos) << m;
  m = error_of([&] { r.get_numbers("mean", {}); });
  EXPECT_NE(m.find("optim.mean[1]"), std::string::npos) << m;
  EXPECT_NE(m.find("finite numbers"), std::string::npos) << m;
}

// Source locations are for us: only in debug builds or with KILN_DEBUG=1.
TEST(ErrorLocation, OnlyInDebugBuildsOrWithKilnDebug) {
  unsetenv("KILN_DEBUG");
  std::string m = error_of([] { KILN_FAIL("plain message"); });
#ifdef NDEBUG
  EXPECT_EQ(m, "plain message");
#else
  EXPECT_NE(m.find("json_reader_test.cpp:"), std::string::npos) << m;
#endif
  setenv("KILN_DEBUG", "1", 1);
  m = error_of([] { KILN_FAIL("plain message"); });
  unsetenv("KILN_DEBUG");
  EXPECT_EQ(m.rfind("plain message (", 0), 0u) << m;
  EXPECT_NE(m.find("json_reader_test.cpp:"), std::string::npos) << m;
}

// Recording mode: each key a reader asks for, with its type, default and accepted values, from the very
// calls that validate it; reading and its errors are unchanged; find() of an absent key only probes.
TEST(JsonReader, KeyRecorderNotesWhatTheReaderAsks) {
  json j = json::parse(R"({"epochs": 3, "sub": {"x": 1}})");
  KeyRecorder rec;
  JsonReader r(j, "train");
  EXPECT_EQ(r.get("epochs", int64_t{1}, int64_t{1}, int64_t{100}), 3);
  EXPECT_EQ(r.get("seed", int64_t{0}, int64_t{0}, INT64_MAX), 0);
  EXPECT_EQ(r.get_choice("precision", "fp32", {"fp32", "bf16"}), "fp32");
  EXPECT_DOUBLE_EQ(r.get("lr", 0.1, 0.0, 10.0), 0.1);
  std::string device = "cpu";
  r.read("device", device);
  r.allow("type");
  EXPECT_EQ(r.find("absent"), nullptr);
  EXPECT_NE(r.find("sub"), nullptr);
  r.raw("class_weights");
  r.finish();
  auto at = [&](const std::string& path) -> const KeyRecord* {
    for (const KeyRecord& k : rec.keys())
      if (k.path == path) return &k;
    return nullptr;
  };
  ASSERT_NE(at("train.epochs"), nullptr);
  EXPECT_EQ(at("train.epochs")->type, "integer");
  EXPECT_EQ(at("train.epochs")->def, json(1));
  EXPECT_EQ(at("train.epochs")->accepted, "1..100");
  EXPECT_EQ(at("train.seed")->accepted, ">= 0");
  EXPECT_EQ(at("train.precision")->type, "string");
  EXPECT_EQ(at("train.precision")->accepted, "fp32, bf16");
  EXPECT_EQ(at("train.precision")->def, json("fp32"));
  EXPECT_EQ(at("train.lr")->type, "number");
  EXPECT_EQ(at("train.device")->type, "string");
  EXPECT_EQ(at("train.device")->def, json("cpu"));
  EXPECT_EQ(at("train.type")->type, "");
  EXPECT_EQ(at("train.absent"), nullptr);
  EXPECT_EQ(at("train.sub")->type, "JSON");
  EXPECT_FALSE(at("train.class_weights")->has_default);

  // Errors are the same while recording; the key is noted before the value is checked.
  json bad = json::parse(R"({"epochs": 0})");
  JsonReader b(bad, "train");
  const std::string m = error_of([&] { b.get("epochs", int64_t{1}, int64_t{1}, int64_t{100}); });
  EXPECT_NE(m.find("train.epochs = 0 is out of range; accepted: 1..100"), std::string::npos) << m;
  int required = 0;
  EXPECT_FALSE(error_of([&] { b.require("size", required); }).empty());
  EXPECT_TRUE(at("train.size") && at("train.size")->required);
}

TEST(JsonReader, NothingIsRecordedWithoutARecorder) {
  EXPECT_EQ(KeyRecorder::current(), nullptr);
  {
    KeyRecorder outer;
    {
      KeyRecorder inner;
      EXPECT_EQ(KeyRecorder::current(), &inner);
      json j = json::object();
      JsonReader(j, "a").get("k", true);
      EXPECT_EQ(inner.keys().size(), 1u);
    }
    EXPECT_EQ(KeyRecorder::current(), &outer);
    EXPECT_TRUE(outer.keys().empty());
  }
  EXPECT_EQ(KeyRecorder::current(), nullptr);
}
