// Data-parallel replicas in one process (train_replicas: one thread per replica, as `device=0,1`
// runs its GPUs), here on CPU replicas with the thread communicator: the averaged step equals the
// single replica's step on the combined batch, the global batch must divide by the replicas, and
// a replica that fails stops the others with its error instead of a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/io/safetensors.h"
#include "tests/data_parallel_config.h"
#include "tests/expect_error.h"
#include "tests/gradcheck.h"
#include "tools/deploy/config.h"
#include "tools/engine/trainer.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

json plain_config(const std::string& runs, const std::string& name) {
  return kiln::testing::data_parallel_config(runs, name, 30);
}

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_replicas_" + name;
  fs::remove_all(d);
  return d;
}

TrainResult run_replicas(const json& config, int n) {
  return train_replicas(config, std::vector<Device>(static_cast<size_t>(n), Device::cpu()),
                        make_thread_communicators(n), /*quiet=*/true);
}

// Fails its `fail_at`-th all-reduce: a replica dying in the middle of training.
class FailingComm : public Communicator {
 public:
  FailingComm(std::unique_ptr<Communicator> inner, int fail_at) : inner_(std::move(inner)), left_(fail_at) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return "failing"; }
  std::unique_ptr<Work> all_reduce_sum_async(const Tensor& t) override {
    KILN_CHECK(--left_ != 0, "replica ", rank(), " failed on purpose");
    return inner_->all_reduce_sum_async(t);
  }
  void broadcast(const Tensor& t, int root) override { inner_->broadcast(t, root); }
  void barrier() override { inner_->barrier(); }
  void all_reduce_doubles(std::vector<double>& v) override { inner_->all_reduce_doubles(v); }
  int64_t all_reduce_min(int64_t v) override { return inner_->all_reduce_min(v); }
  void abort(int code) override { inner_->abort(code); }

 private:
  std::unique_ptr<Communicator> inner_;
  int left_;
};

}  // namespace

TEST(Replicas, TwoReplicasTakeTheCombinedBatchStep) {
  std::string runs = fresh_dir("combined");
  TrainResult one = run_replicas(plain_config(runs, "one"), 1);
  TrainResult two = run_replicas(plain_config(runs, "two"), 2);
  EXPECT_EQ(two.steps, one.steps);  // batch is the global batch: 4 steps per epoch either way
  EXPECT_EQ(one.steps, 12);
  EXPECT_NEAR(two.train_loss, one.train_loss, 1e-5);
  EXPECT_NEAR(two.val_top1, one.val_top1, 1e-9);  // evaluation counts every sample once
  auto w1 = load_safetensors(one.run_dir + "/last.safetensors").tensors;
  auto w2 = load_safetensors(two.run_dir + "/last.safetensors").tensors;
  ASSERT_EQ(w1.size(), w2.size());
  for (auto& [name, t] : w1) kiln::testing::expect_close(w2.at(name), t.to_double_vector(), 1e-5, 1e-4, name);
  // The loss curve too: per-epoch training loss of 2 replicas against 1.
  auto col = [](const std::string& dir) {
    std::vector<double> v;
    std::ifstream f(dir + "/metrics.csv");
    std::string header, line;
    std::getline(f, header);
    size_t col = 0;
    for (size_t p = 0; p < header.find("train_loss"); ++p) col += header[p] == ',';
    while (std::getline(f, line)) {
      size_t start = 0;
      for (size_t k = 0; k < col; ++k) start = line.find(',', start) + 1;
      v.push_back(std::stod(line.substr(start)));
    }
    return v;
  };
  std::vector<double> l1 = col(one.run_dir), l2 = col(two.run_dir);
  ASSERT_EQ(l1.size(), 3u);
  ASSERT_EQ(l2.size(), 3u);
  for (size_t e = 0; e < 3; ++e) EXPECT_NEAR(l2[e], l1[e], 1e-5) << "epoch " << e + 1;
  EXPECT_LT(l1[2], l1[0]);  // and it learns
}

// With batch norm, each replica's running statistics come from its own shard. The evaluation the
// run reports (summed over the replicas' shards) must be that of the checkpoint it saves: every
// replica evaluates with rank 0's statistics, which the checkpoint holds.
TEST(Replicas, EvaluationIsThatOfTheSavedBatchNormStatistics) {
  json c = plain_config(fresh_dir("bn"), "bn");
  c["model"]["layers"].insert(c["model"]["layers"].begin() + 1, json{{"type", "batch_norm2d"}, {"num_features", 8}});
  apply_overrides(c, {"epochs=2"});
  TrainResult two = run_replicas(c, 2);
  EvalResult saved = evaluate(c, two.run_dir + "/last.safetensors");
  EXPECT_EQ(saved.samples, 128);
  EXPECT_NEAR(two.val_top1, saved.top1, 1e-9);
  EXPECT_NEAR(two.val_loss, saved.loss, 1e-6 * (1 + saved.loss));
}

TEST(Replicas, GlobalBatchMustDivideByTheReplicas) {
  json c = plain_config(fresh_dir("divide"), "divide");
  apply_overrides(c, {"batch=33"});
  kiln::testing::expect_error([&] { run_replicas(c, 2); }, {"data.batch_size = 33 is the global batch and must divide by the 2 ranks"});
}

TEST(Replicas, AFailingReplicaStopsTheOthers) {
  json c = plain_config(fresh_dir("failing"), "failing");
  std::vector<std::unique_ptr<Communicator>> comms = make_thread_communicators(2);
  comms[1] = std::make_unique<FailingComm>(std::move(comms[1]), 3);
  auto t0 = std::chrono::steady_clock::now();
  kiln::testing::expect_error([&] { train_replicas(c, {Device::cpu(), Device::cpu()}, std::move(comms), true); },
                              {"replica 1 failed on purpose"});
  // Well within the 30 s collective timeout: the failure aborts the others at once.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
}

// batch=0.0005 (AutoBatch at 0.05% of the free memory, a few MiB: a batch well below the cap) with 2
// replicas: both profile their own steps with half of the free memory each, agree on the smaller
// batch, and train with twice that as the global batch.
TEST(Replicas, AutoBatchAgreesOnOneBatchForEveryReplica) {
  json c = plain_config(fresh_dir("autobatch"), "autobatch");
  apply_overrides(c, {"batch=0.0005", "data.synthetic.size=4096", "epochs=1", "train.max_steps_per_epoch=2"});
  TrainResult r = run_replicas(c, 2);
  EXPECT_EQ(r.batch % 2, 0);
  EXPECT_GE(r.batch, 2);
  EXPECT_LT(r.batch, 2 * 1024);  // chosen by the memory target, not the cap
  EXPECT_EQ(r.steps, 2);
  std::ifstream f(r.run_dir + "/config.json");
  json run = json::parse(f);
  EXPECT_EQ(run["data"]["batch_size"].get<int64_t>(), r.batch) << "the run folder records the chosen batch";
}

// The thread communicator on its own: sums in rank order on every rank, broadcast, min, and a
// rank that never arrives is named after the timeout.
TEST(Replicas, ThreadCommunicatorCollectivesAndTimeout) {
  auto comms = make_thread_communicators(3);
  std::vector<std::thread> ts;
  std::vector<std::vector<float>> sums(3), bcast(3);
  std::vector<int64_t> mins(3);
  for (int r = 0; r < 3; ++r) {
    ts.emplace_back([&, r] {
      Communicator& c = *comms[static_cast<size_t>(r)];
      Tensor t = Tensor::from_vector(std::vector<float>{1.0f * r, 10.0f, -1.0f * r, 0.5f, 2.0f}, {5});
      c.all_reduce_sum(t);
      sums[static_cast<size_t>(r)] = t.to_float_vector();
      Tensor b = Tensor::full({2}, 7.0 + r);
      c.broadcast(b, 2);
      bcast[static_cast<size_t>(r)] = b.to_float_vector();
      mins[static_cast<size_t>(r)] = c.all_reduce_min(40 - r);
      c.barrier();
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(sums[static_cast<size_t>(r)], (std::vector<float>{3, 30, -3, 1.5f, 6}));
    EXPECT_EQ(bcast[static_cast<size_t>(r)], (std::vector<float>{9, 9}));
    EXPECT_EQ(mins[static_cast<size_t>(r)], 38);
  }
  auto two = make_thread_communicators(2);
  two[0]->set_timeout(std::chrono::milliseconds(200));
  kiln::testing::expect_error([&] { two[0]->barrier(); },
                              {"rank 0: barrier did not finish within 0.2 s; ranks that did not arrive: 1"});
  kiln::testing::expect_error([&] { two[1]->barrier(); }, {"rank 1: rank 0 failed or timed out"});
}
