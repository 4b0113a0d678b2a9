// The data-parallel pieces on a real GPU (label `gpu`; one GPU is enough): the NCCL Communicator the
// trainer talks to (every collective on one rank, then abort), GradSync's buckets over it, a replica
// trained through train_replicas with an NCCL communicator against the plain single-rank run, and
// AutoBatch choosing a batch from the device's free memory whose training peak stays within the
// target. Several GPUs add the 2-rank cases (skipped on a one-GPU machine).
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/autograd.h"
#include "core/cuda/nccl_comm.h"
#include "core/ops/loss.h"
#include "core/rng.h"
#include "models/registry.h"
#include "optim/grad_sync.h"
#include "tools/deploy/config.h"
#include "tools/engine/trainer.h"

using namespace kiln;
using kiln::gputest::gpu;

namespace {

std::unique_ptr<Communicator> one_rank_nccl() {
  auto ncs = cuda::NcclComm::create_local({0});
  return cuda::make_nccl_communicator(std::move(ncs[0]));
}

json small_config(const std::string& name) {
  json c = json::parse(R"({
    "model": {"name": "resnet_cifar", "depth": 8, "width": 8, "in_channels": 3, "num_classes": 10},
    "data": {"source": "synthetic", "synthetic": {"size": 512, "height": 32, "width": 32, "channels": 3, "num_classes": 10},
             "batch_size": 64, "workers": 2},
    "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
    "schedule": {"name": "cosine"},
    "train": {"epochs": 2, "seed": 7, "plots": false, "device": "0"}
  })");
  std::string runs = ::testing::TempDir() + "kiln_dp_gpu_" + name;
  std::filesystem::remove_all(runs);
  c["name"] = name;
  c["train"]["runs_dir"] = runs;
  return c;
}

}  // namespace

TEST(DataParallelOnGpu, NcclCommunicatorCollectivesOnOneRank) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  auto comm = one_rank_nccl();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->backend(), "nccl");
  Tensor t = Tensor::full({1000}, 2.5, DType::f32, gpu());
  comm->all_reduce_sum(t);
  EXPECT_EQ(t.to_double_vector(), std::vector<double>(1000, 2.5));
  std::vector<double> v{1.5, -2.0, 1e10};
  comm->all_reduce_doubles(v);
  EXPECT_EQ(v, (std::vector<double>{1.5, -2.0, 1e10}));
  EXPECT_EQ(comm->all_reduce_min(37), 37);
  Tensor b = Tensor::full({5}, 7.0, DType::i64, gpu());
  comm->broadcast(b, 0);
  EXPECT_EQ(b.to_int_vector(), std::vector<int64_t>(5, 7));
  comm->barrier();
  comm->abort(1);
  EXPECT_THROW(comm->barrier(), Error);
}

// GradSync over NCCL: small buckets, each launched exactly once (always_reduce: a one-rank
// communicator would skip the all-reduce otherwise), and with one rank the averaged gradients are
// the step's own gradients bit for bit (compared within the same backward: cuDNN's backward
// algorithms need not be deterministic, so a second run is compared only within a tolerance).
TEST(DataParallelOnGpu, GradSyncOverNcclLaunchesEveryBucketOnce) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  json cfg = {{"name", "resnet_cifar"}, {"depth", 8}, {"width", 4}, {"in_channels", 3}, {"num_classes", 10}};
  Tensor x = gputest::rand_cpu({8, 16, 16, 3}, 3).to(gpu());
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8}).to(gpu());
  using Grads = std::vector<std::vector<double>>;
  auto run = [&](bool synced, std::vector<size_t>* launched, Grads* before_finish) {
    manual_seed(11);
    auto m = models::build_model(cfg);
    m->to(gpu());
    std::vector<Tensor> ps;
    for (auto& [n, p] : m->named_parameters()) ps.push_back(p);
    auto comm = one_rank_nccl();
    std::unique_ptr<GradSync> sync;
    if (synced) {
      sync = std::make_unique<GradSync>(ps, *comm, 4 << 10, /*always_reduce=*/true);  // 4 KiB: several buckets
      sync->on_launch = [&](size_t b) { launched->push_back(b); };
    }
    ops::cross_entropy(m->forward(x), y).backward();
    if (sync) {
      for (auto& p : ps) before_finish->push_back(p.grad().to_double_vector());
      sync->finish();
      EXPECT_GT(sync->num_buckets(), 2u);
      EXPECT_EQ(launched->size(), sync->num_buckets());
    }
    Grads grads;
    for (auto& p : ps) grads.push_back(p.grad().to_double_vector());
    return grads;
  };
  std::vector<size_t> launched;
  Grads before;
  auto plain = run(false, nullptr, nullptr), synced = run(true, &launched, &before);
  std::vector<size_t> sorted = launched;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_FALSE(sorted.empty()) << "no bucket was launched";
  for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(sorted[i], i) << "bucket " << i << " launched once";
  ASSERT_EQ(before.size(), synced.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(before[i], synced[i]) << "parameter " << i;
  ASSERT_EQ(plain.size(), synced.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(plain[i].size(), synced[i].size());
    double scale = 0;
    for (double v : plain[i]) scale = std::max(scale, std::abs(v));
    for (size_t j = 0; j < plain[i].size(); ++j)
      ASSERT_NEAR(plain[i][j], synced[i][j], 1e-4 * scale + 1e-7) << "parameter " << i << " [" << j << "]";
  }
}

// The trainer's replica path with an NCCL communicator (what device=0,1 runs, here with one GPU)
// trains like the plain one-device run: same steps, loss within the tolerance of cuDNN's
// non-deterministic backward algorithms.
TEST(DataParallelOnGpu, OneGpuReplicaOverNcclTrainsLikeThePlainRun) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  TrainResult plain = train(small_config("plain"), true);
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.push_back(one_rank_nccl());
  TrainResult nccl = train_replicas(small_config("nccl"), {gpu()}, std::move(comms), true);
  EXPECT_EQ(nccl.steps, plain.steps);
  EXPECT_EQ(nccl.steps, 16);
  EXPECT_NEAR(nccl.train_loss, plain.train_loss, 1e-3 * plain.train_loss);
  EXPECT_TRUE(std::isfinite(nccl.val_loss));
}

// batch=0.02: AutoBatch measures the GPU's free memory, profiles steps, and the real training's
// peak stays within 10% over the target (2% of the free memory: a batch below the cap).
TEST(DataParallelOnGpu, AutoBatchOnTheDeviceStaysWithinTheTarget) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  json c = small_config("autobatch");
  apply_overrides(c, {"batch=0.02", "epochs=1", "train.max_steps_per_epoch=3", "data.synthetic.size=8192",
                      "model.width=16"});
  TrainResult r = train(c, true);
  EXPECT_GT(r.autobatch_target_bytes, 0);
  EXPECT_GE(r.batch, 64);
  EXPECT_LT(r.batch, 8192) << "the memory target, not the cap, should decide";
  EXPECT_LE(r.peak_bytes, 1.1 * r.autobatch_target_bytes)
      << "peak " << r.peak_bytes / (1 << 20) << " MiB, target " << r.autobatch_target_bytes / (1 << 20) << " MiB";
  EXPECT_GE(r.peak_bytes, 0.5 * r.autobatch_target_bytes) << "AutoBatch left most of the target unused";
}

#endif  // KILN_WITH_CUDA
