// NCCL communicator: every visible GPU in one process (one thread per GPU, as the trainer drives
// them), all_reduce sum/avg and broadcast against values computed here; a one-rank communicator
// from a unique id (the multi-process path); timeouts and use after abort, under a watchdog.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include <chrono>
#include <thread>

#include "core/comm.h"
#include "core/cuda/cuda_ops.h"
#include "core/cuda/nccl_comm.h"

using namespace kiln;

TEST(CudaNccl, LocalAllReduceAndBroadcast) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  int n = cuda_device_count();
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  auto comms = cuda::NcclComm::create_local(devices);
  ASSERT_EQ(static_cast<int>(comms.size()), n);
  const int64_t len = 100003;
  std::vector<Tensor> sums(n), avgs(n), bc(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        Device d = Device::cuda(r);
        EXPECT_EQ(comms[r]->rank(), r);
        EXPECT_EQ(comms[r]->size(), n);
        sums[r] = Tensor::full({len}, r + 1.0, DType::f32, d);
        avgs[r] = Tensor::full({len}, 2.0 * (r + 1), DType::bf16, d);
        bc[r] = Tensor::full({7}, r == 0 ? 42.0 : -1.0, DType::i64, d);
        comms[r]->all_reduce(sums[r], cuda::ReduceOp::sum);
        comms[r]->all_reduce(avgs[r], cuda::ReduceOp::avg);
        comms[r]->broadcast(bc[r], 0);
        comms[r]->synchronize(60.0);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  double total = n * (n + 1) / 2.0;
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(sums[r].to_double_vector(), std::vector<double>(len, total)) << "rank " << r;
    EXPECT_EQ(avgs[r].to_double_vector(), std::vector<double>(len, total * 2.0 / n)) << "rank " << r;
    EXPECT_EQ(bc[r].to_int_vector(), std::vector<int64_t>(7, 42)) << "rank " << r;
  }
  destroy_concurrently(comms);  // one by one from this thread, a second rank's destroy would never return
}

TEST(CudaNccl, OneRankFromUniqueIdAndAbort) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  std::string id = cuda::NcclComm::unique_id();
  EXPECT_EQ(id.size(), 128u);
  cuda::NcclComm comm(id, 1, 0, 0, 60.0);
  Tensor t = Tensor::full({1000}, 3.0, DType::f32, Device::cuda(0));
  comm.all_reduce(t, cuda::ReduceOp::avg);
  comm.synchronize(60.0);
  EXPECT_EQ(t.to_double_vector(), std::vector<double>(1000, 3.0));
  EXPECT_THROW(comm.all_reduce(Tensor::zeros({4}, DType::f32), cuda::ReduceOp::sum), Error);  // a CPU tensor
  EXPECT_THROW(comm.all_reduce(Tensor::zeros({4}, DType::i32, Device::cuda(0)), cuda::ReduceOp::avg), Error);
  comm.abort();
  EXPECT_TRUE(comm.aborted());
  EXPECT_THROW(comm.all_reduce(t, cuda::ReduceOp::sum), Error);
  EXPECT_THROW(cuda::NcclComm(id.substr(0, 10), 1, 0, 0), Error);
}

TEST(CudaNccl, MissingPeerTimesOut) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  // Rank 0 of 2 with nobody else joining: construction must give up after the timeout, not hang;
  // the abort of the init in progress is bounded too (10 s). The watchdog turns a hang into a failure.
  gputest::Watchdog dog(30, "CudaNccl.MissingPeerTimesOut");
  std::string id = cuda::NcclComm::unique_id();
  auto start = std::chrono::steady_clock::now();
  try {
    cuda::NcclComm comm(id, 2, 0, 0, 3.0);
    FAIL() << "joining a 2-rank communicator alone did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("within 3 s"), std::string::npos) << e.what();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(s, 3.0);
  EXPECT_LT(s, 3.0 + 10.0 + 2.0) << "timeout plus the bounded abort";
}

#endif  // KILN_WITH_CUDA
