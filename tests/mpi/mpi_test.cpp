// Run by CTest under `mpirun -np 2` (tests/CMakeLists.txt): collectives and bucketed gradient
// averaging across two CPU ranks.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "optim/grad_sync.h"
#include "tests/gradcheck.h"
#include "tools/mpi_comm.h"

using namespace kiln;

static Communicator& comm() {
  static std::unique_ptr<Communicator> c = make_process_communicator();
  return *c;
}

TEST(Mpi, Collectives) {
  if (comm().size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  int r = comm().rank();
  Tensor t = Tensor::from_vector(std::vector<float>{1.0f + r, 10.0f * (r + 1)}, {2});
  comm().all_reduce_sum(t);
  EXPECT_EQ(t.to_float_vector(), (std::vector<float>{3.0f, 30.0f}));
  Tensor b = Tensor::full({3}, r == 0 ? 7.0 : -1.0);
  comm().broadcast(b, 0);
  EXPECT_EQ(b.to_float_vector(), (std::vector<float>{7, 7, 7}));
  EXPECT_EQ(comm().all_reduce_min(100 + r), 100);
  std::vector<double> v{0.5, static_cast<double>(r)};
  comm().all_reduce_doubles(v);
  EXPECT_EQ(v, (std::vector<double>{1.0, 1.0}));
  comm().barrier();
}

// Each rank computes a mean loss over its half of the batch; after GradSync the gradients equal
// the single-process gradient of the mean loss over the whole batch.
TEST(Mpi, GradSyncEqualsCombinedBatch) {
  if (comm().size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  Tensor x = kiln::testing::randn({8, 6}, 1);  // the combined batch, same on both ranks
  std::vector<Tensor> params;
  for (int i = 0; i < 5; ++i) params.push_back(kiln::testing::randn({6}, 100 + i).set_requires_grad(true));
  auto loss_of = [&](const Tensor& xb) {
    Tensor h = xb;
    for (auto& p : params) h = ops::relu(ops::add(ops::mul(h, p), p));
    return ops::mean(ops::square(h));
  };
  loss_of(x).backward();
  std::vector<std::vector<double>> full;
  for (auto& p : params) {
    full.push_back(p.grad().to_double_vector());
    p.zero_grad();
  }
  // Tiny buckets so several all-reduces run, launched in reverse parameter order during backward.
  GradSync sync(params, comm(), /*bucket_bytes=*/48);
  std::vector<size_t> launched;
  sync.on_launch = [&](size_t b) { launched.push_back(b); };
  int r = comm().rank();
  loss_of(x.slice(0, 4 * r, 4 * r + 4)).backward();
  EXPECT_EQ(launched.size(), sync.num_buckets());  // all launched inside backward, before finish()
  sync.finish();
  for (size_t k = 0; k < params.size(); ++k)
    kiln::testing::expect_close(params[k].grad(), full[k], 1e-6, 1e-5, "param " + std::to_string(k));
  for (size_t i = 0; i < launched.size(); ++i) EXPECT_EQ(launched[i], i);
  EXPECT_EQ(sync.bucket_params(0).front(), params.size() - 1);  // last parameter first
}
