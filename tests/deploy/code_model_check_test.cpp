// The pre-run check (check_model_fits_data, tools/deploy/model_check.h) of a model built in code,
// which has no config to name keys from: its output is checked, and its missing config is no error.
#include <gtest/gtest.h>

#include "layers/linear.h"
#include "tests/expect_error.h"
#include "tools/deploy/model_check.h"

using namespace kiln;

namespace {
class CodeNet : public Module {
 public:
  explicit CodeNet(int64_t classes) : Module("CodeNet") {
    flatten = register_module("flatten", std::make_shared<Flatten>());
    fc = register_module("fc", std::make_shared<Linear>(LinearOptions{.in_features = 4 * 4 * 1, .out_features = classes}));
  }
  Tensor forward(const Tensor& x) override { return (*fc)((*flatten)(x)); }
  std::shared_ptr<Flatten> flatten;
  std::shared_ptr<Linear> fc;
};
}  // namespace

TEST(CodeModelCheck, ChecksTheOutputWithoutAConfig) {
  CodeNet fits(10);
  check_model_fits_data(fits, "model", ImageShape{4, 4, 1}, 10, "mnist");
  CodeNet too_few(3);
  const std::string msg = kiln::testing::error_of([&] { check_model_fits_data(too_few, "model", ImageShape{4, 4, 1}, 10, "mnist"); });
  EXPECT_HAS(msg, "num_classes");
  EXPECT_EQ(msg.find("has no config"), std::string::npos) << msg;
}
