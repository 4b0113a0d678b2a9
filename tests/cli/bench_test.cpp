// `kiln bench train` on the CPU (the same code path measures ResNet-50 on a GPU in
// tools/bench/bench_gpu.py): it trains a registry model on a synthetic batch, prints one row with
// images/s and a finite loss, and rejects unknown arguments and devices with one-line errors.
// Only the output's shape is checked here (speed is what the command reports, not a test).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/conv_policy.h"
#include "core/device.h"
#include "core/host_wait.h"
#include "tests/expect_error.h"
#include "tools/cli/commands.h"

using namespace kiln;

TEST(BenchTrain, PrintsImagesPerSecondOnTheCpu) {
  ::testing::internal::CaptureStdout();
  int rc = cli::cmd_bench({"train", "model=lenet", "size=28", "channels=1", "classes=10", "batch=4", "steps=2",
                           "warmup=1", "device=cpu"});
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  std::istringstream lines(out);
  std::string line, row;
  while (std::getline(lines, line))
    if (line.rfind("lenet", 0) == 0) row = line;
  ASSERT_FALSE(row.empty()) << out;
  std::istringstream f(row);
  std::string model, device, dtype, algo;
  double batch = 0, ms = 0, ips = 0, best = 0, loss = 0;
  std::string blocked, host_ms;
  f >> model >> device >> dtype >> batch >> algo >> ms >> ips >> best >> loss >> blocked >> host_ms;
  EXPECT_EQ(blocked, "n/a") << "the CPU never blocks on a device: " << row;
  EXPECT_EQ(host_ms, "n/a") << "the host issue time is a GPU figure: " << row;
  EXPECT_NE(out.find("# host_blocked: the share of the timed steps"), std::string::npos) << out;
  EXPECT_EQ(algo, "default");
  EXPECT_NEAR(best, ips, 0.05 + 0.01 * ips);  // one round: the best is the median
  EXPECT_EQ(device, "cpu");
  EXPECT_EQ(dtype, "fp32");
  EXPECT_EQ(batch, 4);
  EXPECT_GT(ms, 0);
  EXPECT_NEAR(ips, 4 / (ms * 1e-3), 0.05 + 0.01 * ips);  // printed with one decimal
  EXPECT_TRUE(std::isfinite(loss) && loss > 0) << row;
}

// warmup=0 is accepted (the minimum): timing starts before any step has run.
TEST(BenchTrain, NoWarmUpStepsIsFine) {
  ::testing::internal::CaptureStdout();
  int rc = -1;
  EXPECT_NO_THROW(rc = cli::cmd_bench({"train", "model=lenet", "size=28", "channels=1", "classes=10", "batch=2",
                                       "steps=1", "warmup=0", "device=cpu", "precision=bf16"}));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("\nlenet      cpu     bf16       2"), std::string::npos) << out;
  // profile=1 (cudaProfilerStart/Stop around the timed steps on a GPU) is accepted and does nothing here.
  ::testing::internal::CaptureStdout();
  EXPECT_NO_THROW(rc = cli::cmd_bench({"train", "model=lenet", "size=28", "channels=1", "classes=10", "batch=2",
                                       "steps=1", "warmup=0", "device=cpu", "profile=1"}));
  out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("\nlenet      cpu     fp32       2"), std::string::npos) << out;
}

TEST(BenchTrain, BadArgumentsAreOneLineErrors) {
  try {
    cli::cmd_bench({"train", "modle=lenet"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bench train: unknown argument 'modle=lenet' (did you mean model=?); accepted: batch"),
              std::string::npos)
        << e.what();
  }
  try {
    cli::cmd_bench({"train", "model=lenet", "device=cuda:" + std::to_string(cuda_device_count())});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this machine has no such GPU; available: cpu"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cli::cmd_bench({"train", "precision=fp8"}), Error);
  try {
    cli::cmd_bench({"train", "model=lenet", "conv_algo=direct,fast"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv_algo=direct,fast: accepted values are auto, heuristic, direct, winograd "
                                         "and auto less candidates (auto-im2col"),
              std::string::npos)
        << e.what();
  }
  for (const char* bad : {"conv_algo=auto-", "conv_algo=auto-direct", "conv_algo=auto-im2colx", "conv_algo=heuristic-im2col",
                          "conv_algo=auto-blockedx"})
    EXPECT_THROW(cli::cmd_bench({"train", "model=lenet", bad}), Error) << bad;
}

// conv_algo=auto,auto-im2col: one row per variant from one process, and the candidates left out
// are back afterwards.
TEST(BenchTrain, ConvAlgoVariantsAlternateInOneProcess) {
  ::testing::internal::CaptureStdout();
  int rc = -1;
  EXPECT_NO_THROW(rc = cli::cmd_bench({"train", "model=resnet_cifar", "depth=8", "width=4", "size=8", "channels=1",
                                       "classes=10", "batch=2", "steps=1", "warmup=0", "device=cpu",
                                       "conv_algo=auto,auto-winograd-im2col,auto-blocked"}));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find(" auto "), std::string::npos) << out;
  EXPECT_NE(out.find(" auto-winograd-im2col "), std::string::npos) << out;
  EXPECT_NE(out.find(" auto-blocked "), std::string::npos) << out;
  EXPECT_TRUE(ops::conv_algo::excluded().empty());
}

// paced=1 (tools/bench/bench_train.py --paired): after the warm-up, one timed step per line read,
// each followed by its time; the end of the input ends the run early, not in an error.
TEST(BenchTrain, PacedRunsOneStepPerLineOfInput) {
  std::istringstream in("\n\n");
  std::streambuf* prev = std::cin.rdbuf(in.rdbuf());
  ::testing::internal::CaptureStdout();
  int rc = -1;
  EXPECT_NO_THROW(rc = cli::cmd_bench({"train", "model=resnet_cifar", "depth=8", "width=4", "size=8", "channels=1",
                                       "classes=10", "batch=2", "steps=5", "warmup=1", "device=cpu", "paced=1"}));
  std::string out = ::testing::internal::GetCapturedStdout();
  std::cin.rdbuf(prev);
  EXPECT_EQ(rc, 0);
  std::istringstream lines(out);
  std::string line;
  std::vector<std::string> body;
  while (std::getline(lines, line))
    if (line.empty() || line[0] != '#') body.push_back(line);
  ASSERT_EQ(body.size(), 3u) << out;
  EXPECT_EQ(body[0], "ready");
  for (int i = 1; i < 3; ++i) {
    double ms = -1;
    EXPECT_EQ(std::sscanf(body[i].c_str(), "step_ms %lf", &ms), 1) << body[i];
    EXPECT_GT(ms, 0.0) << body[i];
  }
  EXPECT_THROW(cli::cmd_bench({"train", "model=lenet", "paced=1", "rounds=2"}), Error);
  EXPECT_THROW(cli::cmd_bench({"train", "model=lenet", "paced=2"}), Error);
}

// depth= and width= reach the model's keys (choosing a network by images/s, docs/recipes.md); a model
// without them, or a depth it does not take, is the model's own error.
TEST(BenchTrain, DepthAndWidthSetTheModel) {
  ::testing::internal::CaptureStdout();
  int rc = -1;
  EXPECT_NO_THROW(rc = cli::cmd_bench({"train", "model=resnet_cifar", "depth=8", "width=4", "size=8", "channels=1",
                                       "classes=10", "batch=2", "steps=1", "warmup=0", "device=cpu"}));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("\nresnet_cifar"), std::string::npos) << out;
  auto bench_error = [](std::vector<std::string> args) { return kiln::testing::error_of([&] { cli::cmd_bench(args); }); };
  std::string m = bench_error({"train", "model=resnet_cifar", "depth=15", "size=8", "batch=2", "steps=1"});
  EXPECT_NE(m.find("model.depth = 15 is not accepted; accepted: 6n+2"), std::string::npos) << m;
  m = bench_error({"train", "model=lenet", "depth=8", "size=28", "batch=2", "steps=1"});
  EXPECT_NE(m.find("unknown key model.depth"), std::string::npos) << m;
  m = bench_error({"train", "model=resnet_cifar", "width=0", "size=8", "batch=2", "steps=1"});
  EXPECT_NE(m.find("width"), std::string::npos) << m;
}

// conv_algo=direct,winograd: one row per algorithm, the rounds alternating between them.
TEST(BenchTrain, ConvAlgoListGivesOneRowEach) {
  ::testing::internal::CaptureStdout();
  int rc = cli::cmd_bench({"train", "model=lenet", "size=28", "channels=1", "classes=10", "batch=2", "steps=1",
                           "warmup=0", "device=cpu", "rounds=2", "conv_algo=direct,winograd"});
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("the median of 2 rounds"), std::string::npos) << out;
  EXPECT_NE(out.find("\nlenet      cpu     fp32       2 direct"), std::string::npos) << out;
  EXPECT_NE(out.find("\nlenet      cpu     fp32       2 winograd"), std::string::npos) << out;
}

// bench checkpoint rounds=2: each policy runs twice in turn; one row per policy, ratios against the first.
TEST(BenchCheckpoint, RoundsAlternateAndGiveOneRowPerPolicy) {
  ::testing::internal::CaptureStdout();
  int rc = cli::cmd_bench({"checkpoint", "model=resnet18", "size=32", "batch=2", "steps=1", "warmup=0", "classes=10",
                           "rounds=2"});
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("# ms/step: the median of 2 alternating rounds"), std::string::npos) << out;
  EXPECT_NE(out.find("\nnone "), std::string::npos) << out;
  EXPECT_NE(out.find("\nblocks "), std::string::npos) << out;
  try {
    cli::cmd_bench({"checkpoint", "rounds=0"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'rounds=0': rounds takes a whole number >= 1"), std::string::npos)
        << e.what();
  }
}

// The host-wait counter (core/host_wait.h) that bench train's host_blocked column reads: each
// HostWaitTimer scope adds its duration and one call; the column is "n/a" off a GPU and a percentage
// of the step time on one.
TEST(BenchTrain, HostWaitCounterAndColumn) {
  HostWaitStats before = host_wait_stats();
  {
    HostWaitTimer t;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  HostWaitStats after = host_wait_stats();
  EXPECT_EQ(after.calls, before.calls + 1);
  EXPECT_GE(after.seconds - before.seconds, 0.019);
  EXPECT_LT(after.seconds - before.seconds, 1.0);
  EXPECT_EQ(cli::host_blocked_column(Device::cpu(), 0.5, 1.0), "n/a");
  if (cuda_compiled()) {  // a GPU's reads block (core/device.h reads_block); no GPU needs to be visible
    EXPECT_EQ(cli::host_blocked_column(Device::cuda(0), 0.015, 1.0), "1.5%");
    EXPECT_EQ(cli::host_blocked_column(Device::cuda(0), 0.0, 2.0), "0.0%");
    EXPECT_EQ(cli::host_blocked_column(Device::cuda(0), 0.0, 0.0), "0.0%");
  }
}

// `kiln bench winograd` on the recipe's own network: a CIFAR ResNet (no stem option) on 1-channel
// 28x28 images measures every 3x3 shape; the ImageNet ResNets keep their CIFAR stem by default.
TEST(BenchWinograd, CifarResNetOnOneChannelAndTheStemDefault) {
  ::testing::internal::CaptureStdout();
  int rc = -1;
  EXPECT_NO_THROW(rc = cli::cmd_bench({"winograd", "model=resnet20", "size=28", "channels=1", "classes=3", "batch=8",
                                       "dtype=fp32"}));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("# kiln bench winograd: resnet20, input (8, 28, 28, 1) NHWC fp32"), std::string::npos) << out;
  // Shapes of at least 2e7 flops are measured (kMinMeasureFlops): each stage's 3x3 convolutions.
  EXPECT_NE(out.find("n8 h28 w28 c16 k16 3x3 s1x1 p1x1 d1x1 g1 f32 nobias"), std::string::npos) << out;
  EXPECT_NE(out.find("n8 h7 w7 c64 k64 3x3"), std::string::npos) << out;
  ::testing::internal::CaptureStdout();
  EXPECT_NO_THROW(rc = cli::cmd_bench({"winograd", "model=resnet18", "size=16", "batch=2", "dtype=fp32"}));
  out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("# kiln bench winograd: resnet18 (stem cifar), input (2, 16, 16, 3)"), std::string::npos) << out;
  // The CIFAR stem (3x3/1, no maxpool) keeps layer1 at 16x16; the ImageNet stem would leave 4x4.
  EXPECT_NE(out.find("n2 h16 w16 c64 k64 3x3"), std::string::npos) << out;
  // A stem for a model without one is the model config's error.
  ::testing::internal::CaptureStdout();
  try {
    cli::cmd_bench({"winograd", "model=resnet20", "stem=cifar", "size=8", "batch=1"});
    ADD_FAILURE() << "stem=cifar was accepted for resnet20";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key model.stem"), std::string::npos) << e.what();
  }
  ::testing::internal::GetCapturedStdout();
}

// `kiln bench bn_relu` prints one row per dtype and residual, each with both timings and their
// ratio, and refuses an argument it does not know.
TEST(BenchBnRelu, RowsForEachDtypeAndResidual) {
  ::testing::internal::CaptureStdout();
  int rc = -1;
  EXPECT_NO_THROW(rc = cli::cmd_bench({"bn_relu", "batch=2", "size=4", "channels=8", "iters=2", "device=cpu"}));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("# kiln bench bn_relu: x [2, 4, 4, 8], training; 2 alternating iterations"), std::string::npos)
      << out;
  for (const char* row : {"cpu     fp32  no", "cpu     fp32  yes", "cpu     bf16  no", "cpu     bf16  yes"})
    EXPECT_NE(out.find(row), std::string::npos) << row << "\n" << out;
  EXPECT_THROW(cli::cmd_bench({"bn_relu", "batchsize=2"}), Error);
}

// fused_bn_conv=1 is model.fused_bn_conv (tools/bench/bench_gpu.py times ResNet-50 with every switch
// on): a bottleneck ResNet trains with it and says so; other values, and models without the key, are
// one-line errors naming it.
TEST(BenchTrain, FusedBnConvSetsTheModelKey) {
  ::testing::internal::CaptureStdout();
  int rc = -1;
  EXPECT_NO_THROW(rc = cli::cmd_bench({"train", "model=resnet50", "size=32", "channels=3", "classes=10", "batch=2",
                                       "steps=1", "warmup=0", "device=cpu", "fused_bn_conv=1"}));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("\nresnet50   cpu     fp32       2"), std::string::npos) << out;
  // The CPU has no fused kernel: no call reached one.
  EXPECT_NE(out.find("# fused_bn_conv=1: the blocks' conv-BN-ReLU chain through the fused op; cuDNN's fused graphs "
                     "ran in 0 of 0 forward calls, 0 of 0 dgrad, 0 of 0 wgrad"),
            std::string::npos)
      << out;
  kiln::testing::expect_error([] { cli::cmd_bench({"train", "model=resnet50", "fused_bn_conv=yes"}); },
                              {"bench train: 'fused_bn_conv=yes': accepted: 0 or 1 (model.fused_bn_conv)"});
  kiln::testing::expect_error([] { cli::cmd_bench({"train", "model=resnet_cifar", "depth=8", "fused_bn_conv=1"}); },
                              {"unknown key model.fused_bn_conv"});
}
