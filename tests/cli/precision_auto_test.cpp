// train.precision = "auto" (tools/engine/precision_probe.h, docs/precision.md): on a CPU with bf16
// units a real `kiln train` times its step in fp32 and bf16, says so, and trains in (and records) the
// one its own figures choose; bf16 must be at least 10% faster to be taken; a resumed run keeps the
// precision its run folder records and measures nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <cmath>
#include <fstream>
#include <regex>

#include "../kiln_process.h"
#include "core/device.h"
#include "tools/deploy/config.h"
#include "tools/engine/precision_probe.h"

using namespace kiln;
namespace fs = std::filesystem;
namespace kt = kiln::testing;

namespace {

fs::path make_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("kiln_precision_auto_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream(d / "tiny.json") << R"({
    "name": "tiny",
    "model": {"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1},
      {"type": "batch_norm2d", "num_features": 8},
      {"type": "relu"},
      {"type": "flatten"},
      {"type": "linear", "in_features": 512, "out_features": 3}]},
    "data": {"source": "synthetic", "synthetic": {"size": 96, "height": 8, "width": 8, "channels": 3, "num_classes": 3},
             "batch_size": 32, "workers": 1},
    "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "train": {"epochs": 1, "seed": 1, "plots": false, "tensorboard": false}
  })";
  return d;
}

std::string recorded(const fs::path& run) { return load_config_file((run / "config.json").string())["train"]["precision"]; }

}  // namespace

TEST(PrecisionAuto, Bf16OnlyWhenItsMeasuredStepTakesAtMostNinetyPercentOfFp32s) {
  EXPECT_EQ(faster_precision({100, 90, 32}), "bf16");
  EXPECT_EQ(faster_precision({100, 60, 32}), "bf16");
  EXPECT_EQ(faster_precision({100, 91, 32}), "fp32");   // faster, but not by enough to give up precision
  EXPECT_EQ(faster_precision({100, 140, 32}), "fp32");  // an AVX-512 BF16 CPU without AMX, ResNet-20
  EXPECT_EQ(faster_precision({100, 0, 32}), "fp32");    // not measured
}

TEST(PrecisionAuto, ARunMeasuresBothOnACpuWithBf16UnitsAndTrainsInTheFasterOne) {
  const fs::path d = make_dir("run");
  const kt::KilnRun r = kt::run_kiln_in(d, "train tiny.json precision=auto");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::smatch m;
  const std::regex line(R"(precision: auto -> (fp32|bf16): a training step of (\d+) images \(forward and backward\) )"
                        R"(measured on this CPU: fp32 ([0-9.e+-]+) ms, bf16 ([0-9.e+-]+) ms)");
  if (!native_bf16(Device::cpu())) {  // no units: fp32 without measuring (bf16 would be emulated)
    EXPECT_EQ(r.out.find("precision: auto"), std::string::npos) << r.out;
    EXPECT_EQ(recorded(d / "runs" / "tiny"), "fp32");
    return;
  }
  ASSERT_TRUE(std::regex_search(r.out, m, line)) << r.out;
  EXPECT_EQ(m[2].str(), "32") << "the run's batch (below the probe's cap of 64)";
  const PrecisionTiming t{std::stod(m[3].str()), std::stod(m[4].str()), 32};
  EXPECT_GT(t.fp32_ms, 0);
  EXPECT_GT(t.bf16_ms, 0);
  // The figures printed have 3 significant digits: the choice must be theirs unless they sit on the line.
  if (std::abs(t.bf16_ms - kBf16StepShare * t.fp32_ms) > 0.01 * t.fp32_ms) {
    EXPECT_EQ(m[1].str(), faster_precision(t)) << r.out;
  }
  EXPECT_EQ(recorded(d / "runs" / "tiny"), m[1].str()) << "the run folder records what it trained in";
}

TEST(PrecisionAuto, AResumedRunKeepsItsRecordedPrecisionAndMeasuresNothing) {
  const fs::path d = make_dir("resume");
  kt::KilnRun r = kt::run_kiln_in(d, "train tiny.json precision=bf16");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = kt::run_kiln_in(d, "train tiny.json precision=auto epochs=2 resume=runs/tiny");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resumed"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("precision: auto"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("precision:"), std::string::npos) << "no change of precision noted: " << r.out;
  EXPECT_EQ(recorded(d / "runs" / "tiny"), "bf16");
}
