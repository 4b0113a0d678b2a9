// The loss registry (layers/loss.h): train.loss's "cross_entropy" is ops::cross_entropy with the context's
// label smoothing and class weights (soft targets: soft_cross_entropy); a name or an object is accepted,
// anything else refused naming the key; an unknown name lists the registered ones.
#include <gtest/gtest.h>

#include "core/ops/loss.h"
#include "layers/loss.h"
#include "tests/expect_error.h"

using namespace kiln;
using kiln::testing::error_of;

namespace {
Tensor logits() { return Tensor::from_vector(std::vector<float>{0.2f, -1.0f, 2.0f, 0.5f, 0.1f, -0.3f}, {2, 3}); }
}  // namespace

TEST(LossRegistry, CrossEntropyIsTheOpWithTheContextsSmoothingAndWeights) {
  const Tensor labels = Tensor::from_vector(std::vector<int64_t>{2, 0}, {2});
  const Tensor w = Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 0.5f}, {3});
  const LossFunction f = make_loss(loss_options("cross_entropy"), LossContext{0.1, w});
  EXPECT_EQ(f(logits(), labels).item(), ops::cross_entropy(logits(), labels, 0.1, w).item());
  const Tensor soft = Tensor::from_vector(std::vector<float>{0.f, 0.3f, 0.7f, 1.f, 0.f, 0.f}, {2, 3});
  EXPECT_EQ(f(logits(), soft).item(), ops::soft_cross_entropy(logits(), soft, 0.0, w).item());
}

TEST(LossRegistry, ANameOrAnObjectAndNothingElse) {
  EXPECT_EQ(loss_options("cross_entropy"), (json{{"name", "cross_entropy"}}));
  EXPECT_EQ(loss_options(json{{"name", "cross_entropy"}}), (json{{"name", "cross_entropy"}}));
  EXPECT_HAS(error_of([] { loss_options(json(3)); }), "config: train.loss must be a loss's name");
  EXPECT_HAS(error_of([] { make_loss(loss_options("cross_entropi"), {}); }),
             "train.loss.name = \"cross_entropi\" is not a loss (did you mean \"cross_entropy\"?)");
  EXPECT_HAS(error_of([] { make_loss(json{{"name", "cross_entropy"}, {"gamma", 2}}, {}); }), "unknown key train.loss.gamma");
}
