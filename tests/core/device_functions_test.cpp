// The device functions of core/device.h and core/comm.h on the CPU (synchronize, memory, the
// convolution benchmark mode, communicators), the capability questions (reads_block,
// has_pinned_host_memory), host_available_bytes, pinned memory without a GPU (core/pinned.h), the
// errors a build without CUDA gives for a GPU (check_available), and core/step_stats.h's
// accumulate_step_stats on the CPU (core/cpu/step_stats.cpp; the trainer's one path for its
// per-step statistics). GPU side: tests/gpu/runtime_test.cpp, tests/gpu/loss_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "core/comm.h"
#include "core/device.h"
#include "core/dnnl_context.h"
#include "core/host_wait.h"
#include "core/pinned.h"
#include "core/step_stats.h"
#include "core/ops/reduce.h"
#include "tests/expect_error.h"

using namespace kiln;
using kiln::testing::expect_error;

TEST(DeviceFunctions, TheCpuQueuesNothingAndHasNoBenchmarkMode) {
  synchronize(Device::cpu());  // returns at once
  set_conv_benchmark(Device::cpu(), true);  // ignored
  EXPECT_FALSE(conv_benchmark(Device::cpu()));
  expect_error([] { memory_info(Device::cpu()); }, {"memory_info: no cpu kernel"});
  expect_error([] { communicator_id(Device::cpu()); }, {"communicator_id: no cpu kernel"});
  expect_error([] { make_local_communicators({Device::cpu()}); }, {"make_local_communicators: no cpu kernel"});
}

TEST(DeviceFunctions, AGpuInABuildWithoutCudaFailsClearly) {
  if (cuda_compiled()) GTEST_SKIP() << "a CUDA build";
  expect_error([] { Tensor::empty({2}, DType::f32, Device::cuda(0)); },
               {"device cuda:0 is not available: kiln was built without CUDA"});
  const char* unavailable = "device cuda:0 is not available: kiln was built without CUDA";
  expect_error([&] { synchronize(Device::cuda(0)); }, {"synchronize: ", unavailable});
  expect_error([&] { memory_info(Device::cuda(0)); }, {"memory_info: ", unavailable});
  expect_error([&] { communicator_id(Device::cuda(0)); }, {"communicator_id: ", unavailable});
  expect_error([&] { make_local_communicators({Device::cuda(0), Device::cuda(1)}); },
               {"make_local_communicators: ", unavailable});
  expect_error([&] { reads_block(Device::cuda(0)); }, {"reads_block: ", unavailable});
  expect_error([&] { check_available(Device::cuda(1), "my_op"); },
               {"my_op: device cuda:1 is not available: kiln was built without CUDA"});
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_EQ(available_devices(), "cpu (kiln was built without CUDA)");
}

TEST(DeviceFunctions, CheckAvailablePassesTheCpuAndEveryDeviceOfABuildWithCuda) {
  check_available(Device::cpu(), "my_op");  // returns
  if (cuda_compiled()) check_available(Device::cuda(3), "my_op");  // whether it exists is another question
}

TEST(DeviceCapabilities, TheCpuNeitherBlocksOnReadsNorHasPinnedMemory) {
  EXPECT_FALSE(reads_block(Device::cpu()));
  EXPECT_FALSE(has_pinned_host_memory(Device::cpu()));
  EXPECT_FALSE(has_device_communicators(Device::cpu()));  // its ranks reduce over MPI or threads
  if (cuda_compiled()) {  // answered by the registered kernels, whether or not a GPU is visible
    EXPECT_TRUE(reads_block(Device::cuda(0)));
    EXPECT_TRUE(has_pinned_host_memory(Device::cuda(0)));
    EXPECT_TRUE(has_device_communicators(Device::cuda(0)));
  }
}

TEST(DeviceCapabilities, TheCpuComputesInTheHostsMemory) {
  EXPECT_FALSE(has_own_memory(Device::cpu()));
  const double free_cpu = free_memory_bytes(Device::cpu()), host = host_available_bytes();
  EXPECT_GT(free_cpu, 0.0);
  EXPECT_NEAR(free_cpu, host, 0.25 * host);  // the same quantity, read twice while other work runs
  if (cuda_compiled()) EXPECT_TRUE(has_own_memory(Device::cuda(0)));  // its memory_info kernel is registered
}

TEST(DeviceCapabilities, NativeComputeIsF32EverywhereAndTheCpusOwnCheckForLowPrecision) {
  EXPECT_TRUE(native_compute(Device::cpu(), DType::f32));
  EXPECT_EQ(native_compute(Device::cpu(), DType::bf16), onednn::native_compute(DType::bf16));
  EXPECT_EQ(native_compute(Device::cpu(), DType::f16), onednn::native_compute(DType::f16));
}

TEST(DeviceFunctions, HostAvailableBytesIsMeminfosMemAvailable) {
  const double bytes = host_available_bytes();
  EXPECT_GT(bytes, 0.0);
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  bool found = false;
  while (!found && f >> key >> kb >> unit) found = key == "MemAvailable:";
  if (!found) {
    EXPECT_EQ(bytes, 4.0 * (1 << 30));  // the fallback
    return;
  }
  // Read a moment apart: equal to within what other processes took or gave back meanwhile.
  EXPECT_NEAR(bytes, kb * 1024, 0.25 * kb * 1024);
}

TEST(PinnedMemory, WithoutAGpuOrdinaryTensorsAndNoWaits) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: tests/gpu/copy_test.cpp";
  Tensor t = empty_pinned({2, 3}, DType::f32);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_FALSE(is_pinned(t));
  const HostWaitStats before = host_wait_stats();
  wait_host_copies(t);  // nothing to wait for
  EXPECT_EQ(host_wait_stats().calls, before.calls);
  PinnedStaging staging;
  Tensor x = Tensor::ones({4}, DType::f32);
  EXPECT_TRUE(staging.stage(x, 0).same(x));
  EXPECT_FALSE(is_pinned(staging.buffer({4}, DType::f32, 0)));
}

namespace {
Tensor f32(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector(v, s, DType::f32); }
Tensor labels(const std::vector<int64_t>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }
}  // namespace

TEST(StepStats, CpuKernelAccumulatesLossHitsAndTheFirstNonFiniteLoss) {
  const auto acc_fn = accumulate_step_stats_kernel.get(Device::cpu(), "accumulate_step_stats");
  Tensor acc = Tensor::zeros({5}, DType::f64);
  // Rows: argmax 1 (hit), argmax 0 (miss), a tie 2 = 2 (the first: 0, hit), argmax 2 (hit).
  Tensor logits = f32({0, 3, 1, 5, 1, 2, 2, 2, 1, 0, 1, 4}, {4, 3});
  acc_fn(acc, f32({0.5}, {}), logits, labels({1, 2, 0, 2}), 4.0, 0);
  EXPECT_EQ(acc.to_double_vector(), (std::vector<double>{2.0, 3.0, 0.0, 0.0, 0.0}));
  // bf16 logits rank as their f32 values; a NaN loss is counted and the first one remembered.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  acc_fn(acc, f32({nan}, {}), logits.to(DType::bf16), labels({0, 0, 0, 0}), 4.0, 7);
  acc_fn(acc, f32({INFINITY}, {}), logits, labels({0, 0, 0, 0}), 4.0, 9);
  std::vector<double> v = acc.to_double_vector();
  EXPECT_EQ(v[0], 2.0);  // non-finite losses are not added
  EXPECT_EQ(v[1], 3.0 + 2 + 2);
  EXPECT_EQ(v[2], 2.0);
  EXPECT_EQ(v[3], 7.0);
  EXPECT_TRUE(std::isnan(v[4]));
  // NaN ranks above every number (ops::topk_indices), the first NaN on ties.
  Tensor z = Tensor::zeros({5}, DType::f64);
  acc_fn(z, f32({1.0}, {}), f32({1, nan, nan, 9}, {1, 4}), labels({1}), 1.0, 0);
  EXPECT_EQ(z.to_double_vector()[1], 1.0);
  EXPECT_EQ(ops::topk_indices(f32({1, nan, nan, 9}, {1, 4}), 1).to_int_vector(), (std::vector<int64_t>{1}));
  expect_error([&] { acc_fn(Tensor::zeros({4}, DType::f64), f32({1.0}, {}), logits, labels({1, 2, 0, 2}), 1.0, 0); },
               {"accumulate_step_stats", "acc must be 5 packed f64"});
  expect_error([&] { acc_fn(acc, f32({1.0}, {}), logits, labels({1, 2}), 1.0, 0); },
               {"accumulate_step_stats", "logits (N, K) and i64 labels (N)"});
}
