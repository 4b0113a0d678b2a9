// Registry<Maker> (core/registry.h): lookup by name, registry order, and the one error shape of an
// unknown, missing or non-string name; and that every family (layers, models, optimizers, schedules,
// transforms, data sources) reports through it.
#include <gtest/gtest.h>

#include <functional>

#include "core/registry.h"
#include "tests/expect_error.h"

using namespace kiln;

namespace {
using kiln::testing::error_text_of;
using Maker = std::function<int(int)>;
const Registry<Maker>& numbers() {
  static const Registry<Maker> r("a number maker", {{"double", [](int x) { return 2 * x; }},
                                                   {"square", [](int x) { return x * x; }},
                                                   {"negate", [](int x) { return -x; }}});
  return r;
}
}  // namespace

TEST(Registry, FindsByNameInRegistryOrder) {
  EXPECT_EQ(numbers().names(), (std::vector<std::string>{"double", "square", "negate"}));
  EXPECT_EQ(numbers().at("square", "x.kind")(5), 25);
  EXPECT_EQ(numbers().lookup(Json{{"kind", "negate"}}, "x", "kind")(5), -5);
  EXPECT_EQ(numbers().find("cube"), nullptr);
  ASSERT_NE(numbers().find("double"), nullptr);
}

TEST(Registry, UnknownMissingAndNonStringNamesAreOneLineErrors) {
  EXPECT_EQ(error_text_of([] { numbers().at("sqaure", "x.kind"); }),
            "config: x.kind = \"sqaure\" is not a number maker (did you mean \"square\"?); accepted: double, square, negate");
  EXPECT_EQ(error_text_of([] { numbers().at("cube", "x.kind"); }),
            "config: x.kind = \"cube\" is not a number maker; accepted: double, square, negate");
  EXPECT_EQ(error_text_of([] { numbers().lookup(Json::object(), "x", "kind"); }),
            "config: x.kind is required; accepted: double, square, negate");
  EXPECT_EQ(error_text_of([] { numbers().lookup(Json::array({1, 2}), "x", "kind"); }),
            "config: x must be an object with \"kind\", not a list [1,2]");
  EXPECT_EQ(error_text_of([] { numbers().lookup(Json{{"kind", 3}}, "x", "kind"); }), "config: x.kind must be a string, not an integer");
  const Registry<Maker> plain("", {{"a", [](int x) { return x; }}}, ", or a list");
  EXPECT_EQ(error_text_of([&] { plain.at("zzz", "y.name"); }), "config: y.name = \"zzz\" is not accepted; accepted: a, or a list");
}
