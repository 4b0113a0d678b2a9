// The models' `checkpoint` option: "blocks" and "every:K" give the same loss, the same gradient for
// every parameter and the same batch-norm statistics as the plain run (dropout masks replayed).
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/ops/loss.h"
#include "core/rng.h"
#include "models/registry.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::randn;

namespace {
struct Run {
  double loss = 0;
  StateDict grads;
  StateDict state;
};

// Builds the model (same seed, so the same weights), runs one training forward/backward.
Run train_step(json config, const std::string& checkpoint, const Shape& input, int64_t classes) {
  config["checkpoint"] = checkpoint;
  manual_seed(77);
  auto m = models::build_model(config);
  Tensor x = randn(input, 78);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < input[0]; ++i) labels.push_back(i % classes);
  manual_seed(79);  // same dropout masks in every run
  Tensor loss = ops::cross_entropy(m->forward(x), Tensor::from_vector(labels, {input[0]}));
  loss.backward();
  Run r;
  r.loss = loss.item();
  for (auto& [name, p] : m->named_parameters()) {
    EXPECT_TRUE(p.grad().defined()) << name << " with checkpoint " << checkpoint;
    if (p.grad().defined()) r.grads[name] = p.grad();
  }
  r.state = m->state_dict();
  return r;
}

void expect_same(const Run& a, const Run& b, const std::string& what) {
  EXPECT_NEAR(a.loss, b.loss, 1e-6 * std::max(1.0, std::fabs(a.loss))) << what;
  ASSERT_EQ(a.grads.size(), b.grads.size()) << what;
  for (auto& [name, g] : a.grads)
    kiln::testing::expect_close(b.grads.at(name), g.to_double_vector(), 1e-6, 1e-5, what + " grad " + name);
  for (auto& [name, t] : a.state)
    kiln::testing::expect_close(b.state.at(name), t.to_double_vector(), 1e-6, 1e-5, what + " state " + name);
}

void check_model(const json& config, const Shape& input, int64_t classes, const std::vector<std::string>& policies) {
  Run plain = train_step(config, "none", input, classes);
  for (const auto& p : policies) expect_same(plain, train_step(config, p, input, classes), config.dump() + " " + p);
}
}  // namespace

TEST(Recompute, ResNetBlocksGiveThePlainGradients) {
  check_model(json::parse(R"({"name": "resnet_cifar", "depth": 14, "width": 4})"), {2, 8, 8, 3}, 10,
              {"blocks", "every:2", "every:4"});
}

TEST(Recompute, BottleneckBlocks) {
  check_model(json::parse(R"({"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
      {"type": "bottleneck", "in_channels": 8, "planes": 2},
      {"type": "bottleneck", "in_channels": 8, "planes": 4, "stride": 2},
      {"type": "bottleneck", "in_channels": 16, "planes": 4},
      {"type": "global_avg_pool"}, {"type": "linear", "in_features": 16, "out_features": 3}]})"),
              {2, 8, 8, 3}, 3, {"blocks", "every:3"});
}

TEST(Recompute, StagesWithDropoutAndBatchNorm) {
  // LeNet: two stages with BN; dropout sits in the classifier (not checkpointed).
  check_model(json::parse(R"({"name": "lenet", "input_size": 12})"), {3, 12, 12, 1}, 10, {"blocks"});
  // A custom list with dropout inside a checkpointed segment: the recomputation must draw the same mask.
  check_model(json::parse(R"({"layers": [
      {"type": "conv2d", "in_channels": 2, "out_channels": 4, "kernel_size": 3, "padding": 1},
      {"type": "batch_norm2d", "num_features": 4}, {"type": "relu"}, {"type": "dropout", "p": 0.3},
      {"type": "max_pool2d", "kernel_size": 2},
      {"type": "basic_block", "in_channels": 4, "planes": 4},
      {"type": "dropout", "p": 0.2}, {"type": "global_avg_pool"},
      {"type": "linear", "in_features": 4, "out_features": 3}]})"),
              {2, 6, 6, 2}, 3, {"blocks", "every:2"});
}

TEST(Recompute, RunningStatisticsUpdatedOnce) {
  json config = json::parse(R"({"name": "resnet_cifar", "depth": 8, "width": 2, "checkpoint": "blocks"})");
  auto m = models::build_model(config);
  Tensor x = randn({2, 8, 8, 3}, 1);
  ops::cross_entropy(m->forward(x), Tensor::from_vector(std::vector<int64_t>{0, 1}, {2})).backward();
  for (auto& [name, t] : m->named_buffers()) {
    if (name.find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(t.to_int_vector(), std::vector<int64_t>{1}) << name;
    }
  }
}

TEST(Recompute, EvalWithoutGradRunsPlainly) {
  auto m = models::build_model(json::parse(R"({"name": "resnet20", "checkpoint": "blocks"})"));
  m->eval();
  NoGradGuard ng;
  Tensor y = m->forward(randn({1, 16, 16, 3}, 2));
  EXPECT_EQ(y.shape(), (Shape{1, 10}));
  EXPECT_EQ(y.grad_fn(), nullptr);
}

// What "blocks" is for: the step's peak memory (forward + backward, allocator counters) falls well
// below the plain run's; the last block runs plainly, which must not give the saving back.
TEST(Recompute, BlocksLowerTheStepPeak) {
  auto peak_of = [](const std::string& policy) {
    json config = json::parse(R"({"name": "resnet_cifar", "depth": 20})");
    config["checkpoint"] = policy;
    manual_seed(5);
    auto m = models::build_model(config);
    Tensor x = randn({16, 32, 32, 3}, 6);
    std::vector<int64_t> labels(16, 1);
    CachingAllocator& alloc = allocator_for(Device::cpu());
    alloc.reset_peak();
    size_t base = alloc.stats().allocated;
    ops::cross_entropy(m->forward(x), Tensor::from_vector(labels, {16})).backward();
    return static_cast<double>(alloc.stats().peak - base);
  };
  double plain = peak_of("none"), blocks = peak_of("blocks");
  EXPECT_LT(blocks, 0.6 * plain) << "plain " << plain / (1 << 20) << " MiB, blocks " << blocks / (1 << 20) << " MiB";
}
