// The loss registry (core/registry.h): train.loss names the training loss, kiln's "cross_entropy" (the
// default) or one a program registers with register_loss() (or KILN_REGISTER), docs/library.md.
//   "train": {"loss": "cross_entropy"}                        (the same as {"name": "cross_entropy"})
//   "train": {"loss": {"name": "focal", "gamma": 2}}           (a program's own, with its options)
// A loss gets the logits (N, K) in f32 and the targets: the labels (N) i64, or soft targets (N, K) f32
// when train.mixup mixes the batch (label smoothing already in them); it returns the batch's mean loss,
// a scalar recorded by autograd. Its context carries train.label_smoothing and train.class_weights
// (resolved: (K) f32 on the device, or undefined), which kiln's cross-entropy applies.
// The validation loss (val_loss) stays the plain cross-entropy, comparable across losses.
// Tests: tests/layers/loss_registry_test.cpp, tests/cli/plugin/registration_test.cpp.
#pragma once
#include <functional>
#include <string>

#include "core/json_reader.h"
#include "core/registry.h"
#include "core/tensor.h"

namespace kiln {

struct LossContext {
  double label_smoothing = 0;  // train.label_smoothing (hard labels; soft targets carry their own)
  Tensor class_weights;        // train.class_weights resolved, or undefined
};

// logits (N, K) f32, targets (N) i64 labels or (N, K) f32 soft targets -> the mean loss (a scalar).
using LossFunction = std::function<Tensor(const Tensor& logits, const Tensor& targets)>;
// Builds a loss from its options object (with "name"); `path` names it in errors ("train.loss").
using LossMaker = std::function<LossFunction(const json& options, const LossContext& context, const std::string& path)>;

// kiln's "cross_entropy": ops::cross_entropy of labels with the context's smoothing and weights, or
// ops::soft_cross_entropy of soft targets with its weights. The step uses it when its setup names no loss.
Tensor cross_entropy_loss(const Tensor& logits, const Tensor& targets, const LossContext& context);

Registry<LossMaker>& loss_registry();
// Adds a loss; throws if `name` is taken (naming both places). `docs`: what `--help` says of it.
void register_loss(const std::string& name, LossMaker make, ComponentDocs docs = {},
                   const SourcePlace& where = SourcePlace::current());

// train.loss as given (a name, or an object with "name") as the object {"name": ..., options}; throws
// naming `path` for anything else.
json loss_options(const json& given, const std::string& path = "train.loss");
// The loss of `options` (loss_options' form), its options read and checked (errors name `path`).
LossFunction make_loss(const json& options, const LossContext& context, const std::string& path = "train.loss");

}  // namespace kiln
