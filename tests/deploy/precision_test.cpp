// The device and precision a run's config names, as prediction reads them without the training options
// (tools/deploy/precision.h): the forms of train.device, the precision names, and the errors naming the key.
#include <gtest/gtest.h>

#include "../expect_error.h"
#include "tools/deploy/precision.h"

using namespace kiln;

TEST(RunDevice, ReadsTheDeviceFormsAndThePrecisionAndLeavesTheTrainersKeys) {
  RunDevice d = run_device_from_json(json::parse(R"({"device": [0, 1], "precision": "bf16", "epochs": 3,
                                                     "ema": {"decay": 0.99}})"));
  EXPECT_EQ(d.device, "0,1");
  EXPECT_EQ(d.precision, "bf16");
  d = run_device_from_json(json::parse(R"({"device": "cpu"})"));
  EXPECT_EQ(d.device, "cpu");
  EXPECT_EQ(d.precision, "fp32");  // the default, as TrainOptions'
  d = run_device_from_json(json(nullptr));
  EXPECT_EQ(d.device, "");
  EXPECT_EQ(d.precision, "fp32");
  EXPECT_EQ(compute_dtype_of(d.precision, Device::cpu()), DType::f32);
  EXPECT_EQ(compute_dtype_of("bf16", Device::cpu()), DType::bf16);
  EXPECT_EQ(compute_dtype_of("fp16", Device::cpu()), DType::f16);
}

TEST(RunDevice, ErrorsNameTheKeyAndWhatIsAccepted) {
  kiln::testing::expect_error([] { run_device_from_json(json::parse(R"({"precision": "fp8"})"), "train"); },
                              {"train.precision", "fp8", "fp32, bf16, fp16, auto"});
  kiln::testing::expect_error([] { run_device_from_json(json::parse(R"({"device": 1.5})"), "train"); },
                              {"train.device"});
  kiln::testing::expect_error([] { run_device_from_json(json::parse("[1]"), "train"); }, {"train"});
  kiln::testing::expect_error([] { compute_dtype_of("fp8", Device::cpu()); }, {"fp8", "accepted: fp32, bf16, fp16, auto"});
}
