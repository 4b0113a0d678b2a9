// Gradient accumulation and the weight EMA through the trainer, on tiny synthetic problems:
//  - N micro-batches take the step of the N-times-larger batch (no batch norm), also on 2 replicas
//    (GradSync all-reduces once per step); a batch that does not split is refused;
//  - train.accumulate = "auto": AutoBatch's probe logic picks the smallest N whose micro-batch fits;
//  - EMA: evaluated beside the live weights (metrics.csv columns), saved beside them, resumed exactly
//    (bit-exact on CPU), and usable by evaluate() through the `<run>/last.ema.safetensors` link.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/io/safetensors.h"
#include "tests/data_parallel_config.h"
#include "tests/expect_error.h"
#include "tests/gradcheck.h"
#include "tests/resume_util.h"
#include "tools/engine/accumulate.h"
#include "tools/deploy/config.h"
#include "tools/engine/trainer.h"

using namespace kiln;
namespace fs = std::filesystem;
using kiln::testing::expect_error;

namespace {

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_accumulate_" + name;
  fs::remove_all(d);
  return d;
}

TrainResult run_replicas(const json& config, int n) {
  return train_replicas(config, std::vector<Device>(static_cast<size_t>(n), Device::cpu()),
                        make_thread_communicators(n), /*quiet=*/true);
}

// The largest |a - b| over every tensor of two weight files.
double max_abs_diff(const std::string& a, const std::string& b) {
  auto wa = load_safetensors(a).tensors, wb = load_safetensors(b).tensors;
  EXPECT_EQ(wa.size(), wb.size());
  double m = 0;
  for (auto& [name, t] : wa) {
    std::vector<double> x = t.to_double_vector(), y = wb.at(name).to_double_vector();
    for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  }
  return m;
}

// The data-parallel config with batch norm and dropout added, and an EMA.
json bn_config(const std::string& runs, const std::string& name) {
  json c = kiln::testing::data_parallel_config(runs, name, 30);
  json& layers = c["model"]["layers"];
  layers.insert(layers.begin() + 1, json{{"type", "batch_norm2d"}, {"num_features", 8}});
  layers.insert(layers.end() - 1, json{{"type", "dropout"}, {"p", 0.2}});
  c["train"]["ema"] = json{{"decay", 0.9}, {"warmup", true}};
  return c;
}

}  // namespace

// --- accumulation --------------------------------------------------------------------------------

TEST(Accumulate, OptionValuesAndErrors) {
  EXPECT_EQ(accumulate_from_json(json()), 1);
  EXPECT_EQ(accumulate_from_json(json(4)), 4);
  EXPECT_EQ(accumulate_from_json(json("auto")), 0);
  EXPECT_EQ(accumulate_to_json(0), json("auto"));
  EXPECT_EQ(accumulate_to_json(3), json(3));
  for (const char* bad : {"0", "-2", "2.5", "\"many\"", "[2]"})
    expect_error([&] { accumulate_from_json(json::parse(bad)); },
                 {std::string("train.accumulate = ") + bad, "accepted: a positive integer N", "\"auto\""});
}

TEST(Accumulate, MicroBatchSizesCoverTheBatch) {
  EXPECT_EQ(micro_batch_sizes(32, 4), (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_EQ(micro_batch_sizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));  // a short last batch
  EXPECT_EQ(micro_batch_sizes(3, 4), (std::vector<int64_t>{1, 1, 1}));       // never an empty one
  EXPECT_EQ(micro_batch_sizes(7, 1), (std::vector<int64_t>{7}));
}

TEST(Accumulate, FourMicroBatchesTakeTheFourTimesLargerBatchStep) {
  std::string runs = fresh_dir("equal");
  json big = kiln::testing::data_parallel_config(runs, "big", 30);  // batch 32, no batch norm, no dropout
  json micro = kiln::testing::data_parallel_config(runs, "micro", 30);
  micro["train"]["accumulate"] = 4;  // 4 micro-batches of 8
  TrainResult a = train(big, true), b = train(micro, true);
  EXPECT_EQ(b.accumulate, 4);
  EXPECT_EQ(b.steps, a.steps);  // optimizer steps: 4 per epoch either way
  EXPECT_EQ(a.steps, 12);
  EXPECT_NEAR(b.train_loss, a.train_loss, 1e-5);
  // The same weights after 12 steps, up to f32 rounding (the sum of four 8-sample means differs from
  // the 32-sample mean in the last bits): measured max |diff| 3.0e-8 here; the test allows 1e-5.
  double d = max_abs_diff(a.run_dir + "/last.safetensors", b.run_dir + "/last.safetensors");
  EXPECT_LT(d, 1e-5);
  std::cout << "accumulate 4 vs batch x4: max |weight diff| after 12 steps = " << d << "\n";
  // It did train (not a no-op that trivially matches): the weights moved away from the first step's.
  EXPECT_LT(a.train_loss, 1.38);
}

TEST(Accumulate, TwoReplicasAccumulatingTakeTheCombinedBatchStep) {
  // 2 replicas x 2 micro-batches of 8 = the global batch of 32: GradSync all-reduces once per step,
  // after the last micro-batch's backward (an all-reduce per micro-batch would average the first
  // micro-batch's gradients only, and the weights would differ).
  std::string runs = fresh_dir("replicas");
  TrainResult one = run_replicas(kiln::testing::data_parallel_config(runs, "one", 30), 1);
  json c = kiln::testing::data_parallel_config(runs, "two", 30);
  c["train"]["accumulate"] = 2;
  TrainResult two = run_replicas(c, 2);
  EXPECT_EQ(two.steps, one.steps);
  double d = max_abs_diff(one.run_dir + "/last.safetensors", two.run_dir + "/last.safetensors");
  EXPECT_LT(d, 1e-5);
  std::cout << "2 replicas x accumulate 2 vs 1 replica: max |weight diff| = " << d << "\n";
}

TEST(Accumulate, ABatchThatDoesNotSplitIsRefused) {
  json c = kiln::testing::data_parallel_config(fresh_dir("split"), "split", 30);
  c["data"]["batch_size"] = 30;
  c["train"]["accumulate"] = 4;
  expect_error([&] { train(c, true); }, {"data.batch_size = 30", "train.accumulate = 4", "multiple of 4"});
  json r = kiln::testing::data_parallel_config(fresh_dir("split2"), "split2", 30);
  r["data"]["batch_size"] = 32;
  r["train"]["accumulate"] = 3;  // 2 replicas x 3 micro-batches do not divide 32
  expect_error([&] { run_replicas(r, 2); }, {"data.batch_size = 32", "2 rank(s) x train.accumulate = 3"});
  json bad = kiln::testing::data_parallel_config(fresh_dir("bad"), "bad", 30);
  bad["train"]["accumulate"] = 0;
  expect_error([&] { train(bad, true); }, {"train.accumulate = 0", "accepted"});
  json autob = kiln::testing::data_parallel_config(fresh_dir("auto"), "auto", 30);
  autob["data"]["batch_size"] = -1;
  autob["train"]["accumulate"] = "auto";
  expect_error([&] { train(autob, true); }, {"train.accumulate = \"auto\" needs a fixed data.batch_size"});
}

TEST(Accumulate, AutoPicksTheSmallestNWhoseMicroBatchFits) {
  // The probe logic of AutoBatch (tools/engine/autobatch.h) on a synthetic model: 100 MiB fixed + 3 MiB per
  // sample, 2000 MiB free, 60% of it: a micro-batch of up to 366 fits.
  const double MiB = 1 << 20;
  std::vector<int64_t> probed;
  auto probe = [&](int64_t b) {
    probed.push_back(b);
    return 100 * MiB + 3 * MiB * b;
  };
  AccumulationPlan p = plan_accumulation(probe, 2000 * MiB, 0.6, 1024);
  EXPECT_EQ(p.autobatch.batch, 366);
  EXPECT_EQ(p.n, 4);  // 1024 / 2 = 512 does not fit, 1024 / 4 = 256 does
  EXPECT_EQ(p.micro_batch, 256);
  EXPECT_NE(p.report.find("batch 1024 per rank = 4 micro-batch(es) of 256"), std::string::npos) << p.report;
  // A batch that fits whole: N = 1, and AutoBatch never probes beyond the batch.
  probed.clear();
  AccumulationPlan whole = plan_accumulation(probe, 2000 * MiB, 0.6, 96);
  EXPECT_EQ(whole.n, 1);
  for (int64_t b : probed) EXPECT_LE(b, 96);
  // N must divide the batch: 96 with micro-batches of at most 40 -> 3 x 32 (not 96 / 2 = 48).
  EXPECT_EQ(smallest_accumulation(96, 40), 3);
  EXPECT_EQ(smallest_accumulation(97, 40), 97);  // a prime: micro-batches of 1
  expect_error([] { smallest_accumulation(64, 0); }, {"train.accumulate = \"auto\"", "not even a micro-batch of 1"});
}

TEST(Accumulate, AutoThroughTheTrainerRecordsItsChoice) {
  json c = kiln::testing::data_parallel_config(fresh_dir("autorun"), "autorun", 30);
  c["train"]["accumulate"] = "auto";
  c["train"]["epochs"] = 1;
  TrainResult r = train(c, true);
  EXPECT_EQ(r.accumulate, 1);  // a batch of 32 of this model fits in any CPU's memory
  json as_run = json::parse(std::ifstream(r.run_dir + "/config.json"));
  EXPECT_EQ(as_run["train"]["accumulate"], 1);
}

// --- EMA through the trainer -----------------------------------------------------------------------

TEST(TrainerEma, EvaluatedSavedAndResumedExactly) {
  std::string runs = fresh_dir("ema");
  // Interrupted after epoch 1 of 3, then resumed.
  const auto [a, b2] = kiln::testing::train_straight_and_resumed([&](const std::string& n) { return bn_config(runs, n); });
  ASSERT_EQ(b2.steps, a.steps);

  // Bit-exact: the interrupted + resumed run ends with the same EMA (and weights) as the straight one.
  kiln::testing::expect_same_tensors(a.run_dir, b2.run_dir, "last.ema.safetensors");
  auto ea = load_safetensors(a.run_dir + "/last.ema.safetensors").tensors;
  EXPECT_EQ(b2.ema_val_top1, a.ema_val_top1);
  EXPECT_EQ(b2.ema_val_loss, a.ema_val_loss);

  // The EMA is an average, not a copy: its parameters differ from the live ones; the batch-norm
  // buffers are copied from the live model.
  auto live = load_safetensors(a.run_dir + "/last.safetensors").tensors;
  ASSERT_EQ(live.size(), ea.size());
  EXPECT_GT(max_abs_diff(a.run_dir + "/last.safetensors", a.run_dir + "/last.ema.safetensors"), 1e-4);
  EXPECT_EQ(ea.at("1.running_mean").to_double_vector(), live.at("1.running_mean").to_double_vector());
  EXPECT_EQ(ea.at("1.running_var").to_double_vector(), live.at("1.running_var").to_double_vector());
  EXPECT_NE(ea.at("0.weight").to_double_vector(), live.at("0.weight").to_double_vector());

  // metrics.csv carries the EMA's columns, every epoch (also for the resumed run).
  for (const std::string& dir : {a.run_dir, b2.run_dir}) {
    std::ifstream f(dir + "/metrics.csv");
    std::string header, line;
    std::getline(f, header);
    EXPECT_NE(header.find("ema_val_top1"), std::string::npos) << header;
    EXPECT_NE(header.find("ema_val_loss"), std::string::npos) << header;
    int rows = 0;
    while (std::getline(f, line)) ++rows;
    EXPECT_EQ(rows, 3) << dir;
  }

  // `<run>/last.ema.safetensors` is a weights file like any: evaluate() reproduces the EMA's numbers.
  EvalResult e = evaluate(bn_config(runs, "straight"), a.run_dir + "/last.ema.safetensors");
  EXPECT_NEAR(e.top1, a.ema_val_top1, 1e-12);
  EXPECT_NEAR(e.loss, a.ema_val_loss, 1e-6);
  EXPECT_TRUE(fs::exists(a.run_dir + "/best.ema.safetensors"));
}

TEST(TrainerEma, OffWritesNoEmaAndBadValuesAreRefused) {
  std::string runs = fresh_dir("ema_off");
  json c = bn_config(runs, "off");
  c["train"]["ema"] = false;
  c["train"]["epochs"] = 1;
  TrainResult r = train(c, true);
  EXPECT_FALSE(fs::exists(r.run_dir + "/last.ema.safetensors"));
  EXPECT_FALSE(fs::exists(r.run_dir + "/last/last.ema.safetensors"));
  std::ifstream f(r.run_dir + "/metrics.csv");
  std::string header;
  std::getline(f, header);
  EXPECT_EQ(header.find("ema_"), std::string::npos);

  json bad = bn_config(runs, "bad");
  bad["train"]["ema"] = json{{"decay", 1.5}};
  expect_error([&] { train(bad, true); }, {"train.ema.decay = 1.5", "accepted: a number in (0, 1)"});
}
