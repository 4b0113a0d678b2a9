// The one rule for what a run folder stands for (tools/deploy/checkpoint.h, docs/training.md "Which
// checkpoint a run folder stands for"): its weights are its best checkpoint when it has one, else its
// last; its training state is its last. Through the commands: tests/cli/eval_cmd_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/autograd.h"
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

TrainingState state() {
  TrainingState s;
  s.config = json::object();
  return s;
}

double first_weight(const Module& m) { return m.named_parameters()[0].second.to_double_vector()[0]; }

}  // namespace

TEST(RunWeights, BestWhenThereIsOneElseLastAndTheStateIsAlwaysTheLast) {
  kiln::testing::TempDir dir;
  const std::string run = dir.str();
  auto last = model_with(1.0), best = model_with(2.0), into = model_with(0.0);
  save_checkpoint(run + "/last", *last, state());

  // Only a last checkpoint: the weights are the last's.
  EXPECT_EQ(run_weights_checkpoint(run), resolve_checkpoint(run));
  load_weights(run, *into);
  EXPECT_EQ(first_weight(*into), 1.0);

  // With a best checkpoint: the weights are the best's, the training state still the last's.
  save_checkpoint(run + "/best", *best, state());
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
