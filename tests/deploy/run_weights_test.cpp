// The one rule for what a run folder stands for (tools/deploy/checkpoint.h, docs/training.md "Which
// checkpoint a run folder stands for"): its weights are its best checkpoint when it has one, else its
// last; its training state is its last. Through the commands: tests/cli/eval_cmd_test.cpp. And the
// pair's write and weights' checks that a predictor uses without the engine (write_checkpoint_pair,
// load_pair_weights); the training state inside: tests/engine/checkpoint_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include "../expect_error.h"
#include "core/autograd.h"
#include "core/io/safetensors.h"
#include "layers/linear.h"
#include "tests/data/data_test_util.h"  // TempDir
#include "tools/deploy/checkpoint.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<Linear> model_with(double value) {
  LinearOptions o;
  o.in_features = 3;
  o.out_features = 2;
  auto m = std::make_shared<Linear>(o);
  NoGradGuard no_grad;
  for (auto& [name, p] : m->named_parameters()) p.fill_(value);
  return m;
}

// A pair as the engine's save_checkpoint hands it over, at `step`, with a training state this
// library does not read (the engine's load_checkpoint does).
CheckpointPair pair_of(Module& m, int64_t step = 0) {
  CheckpointPair p;
  p.step = step;
  p.model = &m;
  p.state = json{{"step", step}};
  return p;
}

double first_weight(const Module& m) { return m.named_parameters()[0].second.to_double_vector()[0]; }

}  // namespace

TEST(RunWeights, BestWhenThereIsOneElseLastAndTheStateIsAlwaysTheLast) {
  kiln::testing::TempDir dir;
  const std::string run = dir.str();
  auto last = model_with(1.0), best = model_with(2.0), into = model_with(0.0);
  write_checkpoint_pair(run + "/last", pair_of(*last));

  // Only a last checkpoint: the weights are the last's.
  EXPECT_EQ(run_weights_checkpoint(run), resolve_checkpoint(run));
  load_weights(run, *into);
  EXPECT_EQ(first_weight(*into), 1.0);

  // With a best checkpoint: the weights are the best's, the training state still the last's.
  write_checkpoint_pair(run + "/best", pair_of(*best));
  EXPECT_EQ(fs::canonical(run_weights_checkpoint(run)), fs::canonical(resolve_checkpoint(run + "/best")));
  EXPECT_EQ(fs::canonical(resolve_checkpoint(run)), fs::canonical(resolve_checkpoint(run + "/last")));
  load_weights(run, *into);
  EXPECT_EQ(first_weight(*into), 2.0);
  load_weights(run + "/", *into);  // a trailing slash is the same folder
  EXPECT_EQ(first_weight(*into), 2.0);
  load_weights(run + "/last", *into);  // naming the other
  EXPECT_EQ(first_weight(*into), 1.0);
  // A checkpoint, not a run folder, is itself.
  EXPECT_EQ(fs::canonical(run_weights_checkpoint(run + "/last")), fs::canonical(resolve_checkpoint(run + "/last")));
}

// The pair's write and the checks of its weights, as predict and eval rely on them without the engine.
TEST(CheckpointPairFiles, WriteKeepsTheNewestPairsAndItsWeightsLoadFromTheStepTheyWereSaved) {
  kiln::testing::TempDir dir;
  const std::string base = dir.str() + "/last";
  auto a = model_with(1.0), b = model_with(3.0), into = model_with(0.0);
  write_checkpoint_pair(base, pair_of(*a, 4), /*keep=*/2);
  write_checkpoint_pair(base, pair_of(*b, 9), /*keep=*/2);
  EXPECT_EQ(fs::path(checkpoint_pair_path(base)).filename(), "last-9");
  EXPECT_TRUE(fs::is_directory(dir.str() + "/last-4"));  // keep=2: the previous pair stays
  const CheckpointFiles f = checkpoint_files(base);
  const SafetensorsContents state = load_safetensors(f.state);
  EXPECT_EQ(checkpoint_file_step(state, f.state), 9);
  EXPECT_EQ(json::parse(state.metadata.at("kiln_training_state")), json({{"step", 9}}));

  load_pair_weights(base, f.weights, f.state, 9, *into, "weights");
  EXPECT_EQ(first_weight(*into), 3.0);
  // Weights from another step than the state's: a pair of two saves is refused, naming both files.
  kiln::testing::expect_error([&] { load_pair_weights(base, f.weights, f.state, 4, *into, "weights"); },
                              {"the weights " + f.weights + " (step 9)", f.state + " (step 4)", "different steps"});
  write_checkpoint_pair(base, pair_of(*a, 12), /*keep=*/1);
  EXPECT_FALSE(fs::exists(dir.str() + "/last-4"));
  EXPECT_FALSE(fs::exists(dir.str() + "/last-9"));
}

TEST(CheckpointPairFiles, NonFiniteWeightsAreRefusedNamingTheTensor) {
  kiln::testing::TempDir dir;
  auto m = model_with(1.0), into = model_with(0.0);
  {
    NoGradGuard no_grad;
    m->named_parameters()[0].second.fill_(std::nan(""));
  }
  write_checkpoint_pair(dir.str() + "/last", pair_of(*m));
  const std::string name = m->named_parameters()[0].first;
  kiln::testing::expect_error([&] { load_weights(dir.str(), *into); }, {"tensor '" + name + "'", "non-finite"});
}
