// GradSync on one rank (CPU): by default it stays out of the way (no hooks, no all-reduce), and with
// always_reduce it runs the whole bucket path (what tests/gpu/data_parallel_test.cpp does over a
// one-rank NCCL communicator): every bucket launched exactly once during backward, and the averaged
// gradients, over one rank, equal the plain ones bit for bit. The 2-rank cases are tests/mpi/ and
// tests/engine/replicas_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/autograd.h"
#include "core/comm.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/loss.h"
#include "core/rng.h"
#include "optim/grad_sync.h"

namespace kiln {
namespace {

struct StepRun {
  std::vector<std::vector<double>> before_finish, after_finish;
  std::vector<size_t> launched;
  size_t buckets = 0;
};

StepRun run_step(bool always_reduce) {
  // A 6-layer perceptron of 32x32 weights (4 KiB each) and biases, written with core ops: gradients
  // become ready one layer at a time during backward, as a model's do.
  manual_seed(11);
  std::vector<Tensor> ps;
  for (int i = 0; i < 6; ++i) {
    ps.push_back(rand_normal({32, 32}, 0, 0.2, DType::f32, Device::cpu()).set_requires_grad(true));
    ps.push_back(rand_normal({32}, 0, 0.1, DType::f32, Device::cpu()).set_requires_grad(true));
  }
  Tensor x = rand_normal({4, 32}, 0, 1, DType::f32, Device::cpu());
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3}, {4});
  auto comm = make_single_rank_communicator();
  StepRun r;
  GradSync sync(ps, *comm, 4 << 10, always_reduce);  // 4 KiB: several buckets
  sync.on_launch = [&](size_t b) { r.launched.push_back(b); };
  r.buckets = sync.num_buckets();
  Tensor h = x;
  for (size_t i = 0; i < ps.size(); i += 2) h = ops::relu(ops::linear(h, ps[i], ps[i + 1]));
  ops::cross_entropy(h, y).backward();
  for (auto& p : ps) r.before_finish.push_back(p.grad().to_double_vector());
  sync.finish();
  for (auto& p : ps) r.after_finish.push_back(p.grad().to_double_vector());
  return r;
}

TEST(GradSync, OneRankSkipsTheAllReduceByDefault) {
  StepRun r = run_step(false);
  EXPECT_GT(r.buckets, 2u);
  EXPECT_TRUE(r.launched.empty()) << "one rank: no bucket should be launched";
  EXPECT_EQ(r.before_finish, r.after_finish);
}

TEST(GradSync, AlwaysReduceRunsEveryBucketOnceOnOneRank) {
  StepRun r = run_step(true);
  ASSERT_GT(r.buckets, 2u);
  std::vector<size_t> sorted = r.launched;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(sorted.size(), r.buckets) << "every bucket launched during backward, none twice";
  for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(sorted[i], i);
  ASSERT_EQ(r.before_finish.size(), r.after_finish.size());
  for (size_t i = 0; i < r.before_finish.size(); ++i)
    EXPECT_EQ(r.before_finish[i], r.after_finish[i]) << "parameter " << i << ": the average over one rank";
  // The same step without GradSync gives the same gradients (the CPU backward is deterministic).
  StepRun plain = run_step(false);
  EXPECT_EQ(plain.after_finish, r.after_finish);
}

}  // namespace
}  // namespace kiln
