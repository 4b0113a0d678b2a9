// Registry<Maker> (core/registry.h): lookup by name, registry order, and the one error shape of an
// unknown, missing or non-string name; and that every family (layers, models, optimizers, schedules,
// transforms, data sources) reports through it.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>

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
  // A name close to none: the hint that a component of the program's own may not be linked in.
  EXPECT_EQ(error_text_of([] { numbers().at("cube", "x.kind"); }),
            std::string("config: x.kind = \"cube\" is not a number maker; accepted: double, square, negate") +
                Registry<Maker>::kUnlinkedHint);
  EXPECT_EQ(error_text_of([] { numbers().lookup(Json::object(), "x", "kind"); }),
            "config: x.kind is required; accepted: double, square, negate");
  EXPECT_EQ(error_text_of([] { numbers().lookup(Json::array({1, 2}), "x", "kind"); }),
            "config: x must be an object with \"kind\", not a list [1,2]");
  EXPECT_EQ(error_text_of([] { numbers().lookup(Json{{"kind", 3}}, "x", "kind"); }), "config: x.kind must be a string, not an integer");
  const Registry<Maker> plain("", {{"a", [](int x) { return x; }}}, ", or a list");
  EXPECT_EQ(error_text_of([&] { plain.at("zzz", "y.name"); }),
            std::string("config: y.name = \"zzz\" is not accepted; accepted: a, or a list") + Registry<Maker>::kUnlinkedHint);
}

TEST(Registry, AddedNamesFollowInOrderAndANameTwiceNamesBothPlaces) {
  Registry<Maker> r("a number maker");
  r.add("one", [](int) { return 1; }, {.summary = "the constant one"});
  r.add("two", [](int) { return 2; });
  EXPECT_EQ(r.names(), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(r.entry("one")->docs.summary, "the constant one");
  EXPECT_NE(r.entry("one")->place.find("registry_test.cpp:"), std::string::npos) << r.entry("one")->place;
  const std::string twice = error_text_of([&] { r.add("one", [](int) { return 3; }); });
  EXPECT_NE(twice.find("a number maker \"one\" is registered twice: at "), std::string::npos) << twice;
  EXPECT_EQ(twice.find("registry_test.cpp:") != twice.rfind("registry_test.cpp:"), true) << twice;  // both places
  EXPECT_NE(error_text_of([&] { r.add("", [](int) { return 0; }); }).find("the name is empty"), std::string::npos);
  EXPECT_EQ(r.names().size(), 2u);  // the refused ones were not added
}

TEST(Registry, AComponentsOwnErrorIsNamedWithItsKeyUnlessItNamesItAlready) {
  auto throws = [](const std::string& what) { return [what]() -> int { throw std::runtime_error(what); }; };
  EXPECT_EQ(error_text_of([&] { call_component("model", "name", "tiny", "net.cpp:12", throws("no weights")); }),
            "config: model (name \"tiny\", registered at net.cpp:12): no weights");
  // An error that names the key already (a JsonReader's) is rethrown as it was.
  EXPECT_EQ(error_text_of([&] {
              call_component("model", "name", "tiny", "net.cpp:12", []() -> int { KILN_FAIL("model.width = 0 is out of range"); });
            }),
            "model.width = 0 is out of range");
  EXPECT_EQ(call_component("model", "name", "tiny", "", [] { return 5; }), 5);
}
