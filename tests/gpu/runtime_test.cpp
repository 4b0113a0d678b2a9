// CUDA runtime pieces: device discovery, error macros, contexts, the caching allocator on a GPU
// (counters, OOM message), memory info, pinned host memory.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "core/allocator.h"
#include "core/pinned.h"
#include "core/device.h"
#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#include "core/host_wait.h"
#include "core/cuda/runtime.h"
#include "core/ops/linear.h"
#include "core/ops/reduce.h"
#endif

using namespace kiln;

TEST(CudaRuntime, DeviceCountAndParsing) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  EXPECT_TRUE(cuda_compiled());
  EXPECT_EQ(parse_device("0"), Device::cuda(0));
  EXPECT_EQ(parse_device_list("").front(), Device::cuda(0));
  EXPECT_THROW(parse_device(std::to_string(cuda_device_count())), Error);
}

// train.precision = "auto" takes bf16 on a GPU with bf16 units (compute capability 8.0+: the H200's 9.0).
TEST(CudaRuntime, NativeBf16FollowsTheComputeCapability) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
#ifdef KILN_WITH_CUDA
  EXPECT_EQ(native_bf16(Device::cuda(0)), cuda::context(0).cc_major >= 8) << "compute capability "
                                                                          << cuda::context(0).cc_major;
#endif
  EXPECT_THROW(native_bf16(Device::cuda(cuda_device_count())), Error);  // no such GPU
}

TEST(CudaRuntime, PinnedMemoryRoundTrip) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor p = empty_pinned({3, 1000}, DType::f32);
  EXPECT_TRUE(is_pinned(p));
  EXPECT_TRUE(p.device().is_cpu());
  std::vector<double> want(3000);
  float* d = p.data<float>();
  for (int i = 0; i < 3000; ++i) want[i] = d[i] = static_cast<float>(i) * 0.5f;
  Tensor g = p.to(Device::cuda(0));  // asynchronous from pinned memory
  wait_host_copies(p);
  for (int i = 0; i < 3000; ++i) d[i] = -1.f;  // refilling after the wait cannot change g
  EXPECT_EQ(g.to_double_vector(), want);
  EXPECT_FALSE(is_pinned(Tensor::empty({4})));
}

#ifdef KILN_WITH_CUDA

TEST(CudaRuntime, ErrorMacrosNameCallStatusAndLocation) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  // The status comes through a variable, so the names below come from the status, not the call text.
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  setenv("KILN_DEBUG", "1", 1);  // locations are for debug builds or KILN_DEBUG=1 (core/check.cpp)
  std::string m = message([] {
    cudaError_t status = cudaErrorInvalidValue;
    CUDA_CHECK(status);
  });
  EXPECT_NE(m.find("status failed: cudaErrorInvalidValue (invalid argument)"), std::string::npos) << m;
  EXPECT_NE(m.find("runtime_test.cpp:"), std::string::npos) << m;
  unsetenv("KILN_DEBUG");
  m = message([] {
    cudnnStatus_t status = CUDNN_STATUS_BAD_PARAM;
    CUDNN_CHECK(status);
  });
  EXPECT_NE(m.find("CUDNN_STATUS_BAD_PARAM"), std::string::npos) << m;
  m = message([] {
    cublasStatus_t status = CUBLAS_STATUS_INVALID_VALUE;
    CUBLAS_CHECK(status);
  });
  EXPECT_NE(m.find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << m;
  m = message([] {
    ncclResult_t status = ncclInvalidArgument;
    NCCL_CHECK(status);
  });
  EXPECT_NE(m.find(ncclGetErrorString(ncclInvalidArgument)), std::string::npos) << m;
  cudaError_t oom = cudaErrorMemoryAllocation;
  EXPECT_THROW(CUDA_CHECK(oom), OutOfMemoryError);
}

TEST(CudaRuntime, ContextsMemInfoAndVersions) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  cuda::DeviceContext& c = cuda::context(0);
  EXPECT_GT(c.sm_count, 0);
  EXPECT_NE(c.stream, nullptr);
  EXPECT_EQ(&cuda::context(0), &c);
  EXPECT_NE(cuda::cudnn_handle(0), nullptr);
  EXPECT_NE(cuda::cublaslt(0).handle, nullptr);
  auto [free_b, total_b] = cuda_mem_get_info(0);
  EXPECT_GT(free_b, 0u);
  EXPECT_LE(free_b, total_b);
  EXPECT_NE(cuda::versions().find("cuDNN 9"), std::string::npos) << cuda::versions();
  EXPECT_FALSE(cuda::device_name(0).empty());
  EXPECT_THROW(cuda::context(cuda_device_count()), Error);
  cuda::synchronize(0);
}

TEST(CudaRuntime, AllocatorCountersAndOutOfMemory) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Device d = Device::cuda(0);
  size_t before = memory_stats(d).allocated;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::f32, d);
    EXPECT_GE(memory_stats(d).allocated, before + (size_t(4) << 20));
    EXPECT_GE(memory_stats(d).peak, memory_stats(d).allocated);
  }
  EXPECT_EQ(memory_stats(d).allocated, before);
  // A capped allocator fails with a message naming the request.
  allocator_for(d).set_limit(before + (size_t(1) << 20));
  try {
    Tensor t = Tensor::empty({int64_t(1) << 22}, DType::f32, d);
    allocator_for(d).set_limit(0);
    FAIL() << "no OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    allocator_for(d).set_limit(0);
    EXPECT_NE(std::string(e.what()).find(std::to_string(size_t(1) << 24)), std::string::npos) << e.what();
  }
  // More than the device has: cudaMalloc fails, the allocator reports OutOfMemoryError (not a crash).
  auto [free_b, total_b] = cuda_mem_get_info(0);
  EXPECT_THROW(Tensor::empty({static_cast<int64_t>(total_b)}, DType::f64, d), OutOfMemoryError);
  Tensor after = Tensor::ones({16}, DType::f32, d);  // the device still works
  EXPECT_EQ(after.to_double_vector(), std::vector<double>(16, 1.0));
}

TEST(CudaRuntime, UploadTablesAreStreamOrdered) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  std::vector<int32_t> a(1000, 7), b(5000, 9);
  const void* pa = cuda::upload(0, a.data(), a.size() * 4);
  Tensor ta = Tensor::empty({1000}, DType::i32, Device::cuda(0));
  CUDA_CHECK(cudaMemcpyAsync(ta.raw_data(), pa, 4000, cudaMemcpyDeviceToDevice, cuda::stream_of(0)));
  const void* pb = cuda::upload(0, b.data(), b.size() * 4);  // grows the area
  Tensor tb = Tensor::empty({5000}, DType::i32, Device::cuda(0));
  CUDA_CHECK(cudaMemcpyAsync(tb.raw_data(), pb, 20000, cudaMemcpyDeviceToDevice, cuda::stream_of(0)));
  EXPECT_EQ(ta.to_int_vector(), std::vector<int64_t>(1000, 7));
  EXPECT_EQ(tb.to_int_vector(), std::vector<int64_t>(5000, 9));
}

// The staging ring (16 pinned buffers): 40 tables in a row, one growing past the device area
// mid-way, each read by a copy queued right after its upload; every copy sees its own table.
TEST(CudaRuntime, UploadRingKeepsEveryTable) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  std::vector<Tensor> outs;
  std::vector<int64_t> sizes;
  for (int k = 0; k < 40; ++k) {
    int64_t n = k == 20 ? 70000 : 100 + k;  // 280 KB at k = 20: larger than the area so far
    std::vector<int32_t> v(static_cast<size_t>(n), k);
    const void* p = cuda::upload(0, v.data(), v.size() * 4);
    Tensor t = Tensor::empty({n}, DType::i32, Device::cuda(0));
    CUDA_CHECK(cudaMemcpyAsync(t.raw_data(), p, v.size() * 4, cudaMemcpyDeviceToDevice, cuda::stream_of(0)));
    outs.push_back(t);
    sizes.push_back(n);
  }
  for (int k = 0; k < 40; ++k)
    EXPECT_EQ(outs[k].to_int_vector(), std::vector<int64_t>(static_cast<size_t>(sizes[k]), k)) << "table " << k;
}

// The host-wait counter behind `kiln bench train`'s host_blocked column counts the reads that wait
// for queued work: a copy to host memory returns only when it has completed, so the wait is inside
// cudaMemcpyAsync itself (the first GPU run's fp16 figure, 0.00%, missed it). Each read below comes
// after tens of milliseconds of queued matmuls; nearly all of its time must be counted.
TEST(CudaRuntime, ReadsThatWaitForQueuedWorkCountAsHostWaits) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor a = gputest::rand_cpu({4096, 4096}, 3).to(gputest::gpu());
  Tensor c = ops::matmul(a, a);
  cuda::synchronize(0);
  auto busy_then = [&](const char* what, const std::function<void()>& read) {
    for (int k = 0; k < 40; ++k) c = ops::matmul(a, a);  // 40 x 137 GFLOP queued
    const double w0 = host_wait_stats().seconds;
    const auto t0 = std::chrono::steady_clock::now();
    read();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double counted = host_wait_stats().seconds - w0;
    std::printf("%s: the read took %.1f ms, %.1f ms counted as a host wait\n", what, wall * 1e3, counted * 1e3);
    EXPECT_GT(wall, 0.005) << what << ": the queued matmuls should keep the GPU busy for more than 5 ms";
    EXPECT_GE(counted, 0.9 * wall - 1e-3) << what;
  };
  busy_then("Tensor::item (copy to host)", [&] { (void)ops::sum(c).item(); });
  busy_then("the loss scaler's found-inf flag", [&] {
    Tensor g = Tensor::zeros({1000}, DType::f32, gputest::gpu());
    EXPECT_TRUE(cuda::unscale_and_check_finite({g}, 0.5));
  });
}

#endif  // KILN_WITH_CUDA
