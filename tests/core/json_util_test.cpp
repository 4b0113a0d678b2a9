#include <gtest/gtest.h>

#include "core/json_util.h"

using namespace kiln;

static std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

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
