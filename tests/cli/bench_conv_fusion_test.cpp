// `kiln bench conv_fusion` (tools/cli/bench_fusion.cpp) where it cannot run: no GPU named (device=cpu) is
// one clear line and exit 1, nothing on stdout; bad arguments are errors naming what is accepted.
// (Its GPU table runs in tools/gpu_check.sh's bench part.)
#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "tests/expect_error.h"
#include "tools/cli/commands.h"

using namespace kiln;

TEST(BenchConvFusion, WithoutAGpuItSaysSoAndFails) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int rc = -1;
  EXPECT_NO_THROW(rc = cli::cmd_bench({"conv_fusion", "device=cpu"}));
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(out, "");
  EXPECT_EQ(err.rfind("kiln bench conv_fusion: needs a CUDA GPU", 0), 0u) << err;
}

TEST(BenchConvFusion, BadArgumentsNameTheAcceptedOnes) {
  kiln::testing::expect_error([] { cli::cmd_bench({"conv_fusion", "dtype=f32", "device=cpu"}); },
                              {"bench conv_fusion", "dtype=f32", "bf16 and fp16"});
  kiln::testing::expect_error([] { cli::cmd_bench({"conv_fusion", "batchsize=2", "device=cpu"}); },
                              {"bench conv_fusion", "batchsize=2", "batch"});
  kiln::testing::expect_error([] { cli::cmd_bench({"conv_fusion", "batch=0", "device=cpu"}); },
                              {"bench conv_fusion", "batch"});
}
