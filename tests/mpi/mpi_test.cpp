// Run by CTest under `mpirun -np 2` (tests/CMakeLists.txt): collectives, bucketed gradient
// averaging, one data-parallel step and whole training runs across two CPU ranks.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "optim/grad_sync.h"
#include "tests/data_parallel_config.h"
#include "tests/gradcheck.h"
#include "core/io/safetensors.h"
#include "core/ops/loss.h"
#include "core/rng.h"
#include "models/registry.h"
#include "optim/sgd.h"
#include "tools/engine/training_checkpoint.h"
#include "tools/engine/interrupt.h"
#include "tools/engine/mpi_comm.h"
#include "tools/engine/trainer.h"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>

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

// What the trainer does each step, by hand: the ranks start from different weights, rank 0's are
// broadcast, each rank runs its half of the batch, GradSync averages, SGD steps. After the step
// the parameters are bitwise identical on both ranks and equal one process's step on the whole batch.
TEST(Mpi, OneStepEqualsTheCombinedBatchStepOnEveryRank) {
  if (comm().size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  const int r = comm().rank();
  json cfg = json::parse(R"({"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1},
      {"type": "relu"}, {"type": "flatten"}, {"type": "linear", "in_features": 64, "out_features": 3}]})");
  Tensor x = kiln::testing::randn({8, 4, 4, 3}, 11);
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 2, 1}, {8});
  auto sgd_of = [](std::shared_ptr<Module>& m) {
    std::vector<ParamRef> ps;
    for (auto& [n, p] : m->named_parameters()) ps.push_back({n, p, false});
    SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.weight_decay = 1e-3;
    return std::make_unique<SGD>(ps, o);
  };
  manual_seed(100);  // the single-process reference: rank 0's initial weights, the whole batch
  auto ref = models::build_model(cfg);
  auto ref_opt = sgd_of(ref);
  ops::cross_entropy(ref->forward(x), y).backward();
  ref_opt->step();

  manual_seed(100 + r);  // different on each rank until the broadcast
  auto m = models::build_model(cfg);
  for (auto& [n, p] : m->named_parameters()) comm().broadcast(p, 0);
  auto opt = sgd_of(m);
  std::vector<Tensor> ps;
  for (auto& [n, p] : m->named_parameters()) ps.push_back(p);
  GradSync sync(ps, comm());
  ops::cross_entropy(m->forward(x.slice(0, 4 * r, 4 * r + 4)), y.slice(0, 4 * r, 4 * r + 4)).backward();
  sync.finish();
  opt->step();
  std::map<std::string, Tensor> refp;
  for (auto& [n, p] : ref->named_parameters()) refp[n] = p;
  for (auto& [n, p] : m->named_parameters()) {
    kiln::testing::expect_close(p, refp.at(n).to_double_vector(), 1e-6, 1e-5, n);
    Tensor of0 = p.clone(), of1 = p.clone();  // every rank gets rank 0's and rank 1's values
    comm().broadcast(of0, 0);
    comm().broadcast(of1, 1);
    EXPECT_EQ(of0.to_double_vector(), of1.to_double_vector()) << n << " differs between the ranks";
  }
}

// `mpirun -np 2 kiln train`: the 2-rank run (global batch 32, 16 per rank) follows the 1-rank run of
// the same config (a model without batch-norm): the same loss curve and final weights.
TEST(Mpi, TrainingMatchesOneRank) {
  if (comm().size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  const int r = comm().rank();
  const std::string runs = ::testing::TempDir() + "kiln_mpi_train_" + std::to_string(r);
  std::filesystem::remove_all(runs);
  json c = kiln::testing::data_parallel_config(runs, "two_ranks", 60);
  TrainResult two = train(c, /*quiet=*/true);  // launched by mpirun: rank r of 2
  c["name"] = "one_rank";
  TrainResult one = train_replicas(c, {Device::cpu()}, make_thread_communicators(1), true);
  EXPECT_NEAR(two.train_loss, one.train_loss, 1e-5);
  EXPECT_NEAR(two.val_top1, one.val_top1, 1e-9);
  EXPECT_EQ(two.steps, one.steps);
  if (r == 0) {  // only rank 0 writes the run folder
    auto w1 = load_safetensors(one.run_dir + "/last.safetensors").tensors;
    auto w2 = load_safetensors(two.run_dir + "/last.safetensors").tensors;
    for (auto& [name, t] : w1) kiln::testing::expect_close(w2.at(name), t.to_double_vector(), 1e-5, 1e-4, name);
  } else {
    EXPECT_TRUE(two.run_dir.empty());
  }
  comm().barrier();
}

// A SIGINT that reached one rank only (request_signal on rank 1, as if mpirun had forwarded it there
// first): both ranks stop at the same step, the first where they agree (every 8 steps), and rank 0's
// checkpoint is that step's (tools/engine/interrupt.h).
TEST(Mpi, AStopOnOneRankStopsEveryRankAtTheSameStep) {
  if (comm().size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
  const int r = comm().rank();
  const std::string runs = ::testing::TempDir() + "kiln_mpi_stop_" + std::to_string(r);
  std::filesystem::remove_all(runs);
  json c = kiln::testing::data_parallel_config(runs, "stop", 60);
  c["train"]["eval_every"] = 100;  // 4 steps an epoch, evaluated only at the end of the 3
  if (r == 1) request_signal(SIGINT);
  TrainResult t = train(c, /*quiet=*/true);
  request_signal(0);
  EXPECT_EQ(t.interrupted, SIGINT) << "rank " << r;
  EXPECT_EQ(t.steps, 8) << "rank " << r;
  if (r == 0) {
    auto model = models::build_model(c["model"], "model");
    const TrainingState s = load_checkpoint(resolve_checkpoint(t.run_dir), *model);
    EXPECT_EQ(s.step, 8);
    EXPECT_EQ(s.epoch_step, 4);
  }
  comm().barrier();
}
