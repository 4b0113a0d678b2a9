// A model built in code needs no config (Module::to_json() has a default): it trains and saves
// without one, and what needs one says so by name, naming the model (config_for, layers/module.h).
#include <gtest/gtest.h>

#include "layers/linear.h"
#include "layers/sequential.h"
#include "tests/expect_error.h"

using namespace kiln;
using kiln::testing::error_of;

namespace {
class MyNet : public Module {
 public:
  MyNet() : Module("MyNet") { fc = register_module("fc", std::make_shared<Linear>(LinearOptions{.in_features = 2, .out_features = 2})); }
  Tensor forward(const Tensor& x) override { return (*fc)(x); }
  std::shared_ptr<Linear> fc;
};
}  // namespace

TEST(CodeModel, NeedsNoConfigToRun) {
  MyNet net;
  Tensor y = net(Tensor::ones({3, 2}));
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(net.state_dict().size(), 2u);
}

TEST(CodeModel, ToJsonSaysThereIsNoConfig) {
  MyNet net;
  try {
    (void)net.to_json();
    FAIL() << "to_json() of a model built in code returned";
  } catch (const NoConfigError& e) {
    EXPECT_EQ(e.module_type(), "MyNet");
    const std::string msg = e.what();
    EXPECT_HAS(msg, "model 'MyNet' was built in code and has no config");
    EXPECT_HAS(msg, "register it (docs/library.md) or override to_json()");
  }
}

TEST(CodeModel, ConfigForNamesTheFeature) {
  MyNet net;
  EXPECT_EQ(kiln::testing::error_text_of([&] { (void)net.config_for("kiln export"); }),
            "model 'MyNet' was built in code and has no config; kiln export needs one: register it (docs/library.md) "
            "or override to_json()");
  // Inside a model that has a config: both are named.
  Sequential seq;
  seq.push_back(std::make_shared<MyNet>());
  const std::string msg = error_of([&] { (void)seq.config_for("the run's config.json"); });
  EXPECT_HAS(msg, "model 'sequential' was built in code and has no config (its module 'MyNet' has none)");
  EXPECT_HAS(msg, "the run's config.json needs one");
  // A built-in layer's config is returned as to_json() gives it.
  Linear lin(LinearOptions{.in_features = 2, .out_features = 3});
  EXPECT_EQ(lin.config_for("kiln export"), lin.to_json());
}
