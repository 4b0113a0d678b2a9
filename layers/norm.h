// Normalisation layers.
//   BatchNorm2d: over the channel (last) dim of NHWC activations, or over features of (N, C) inputs
//     (registered as "batch_norm2d" and "batch_norm1d"; same module). Parameters "weight" (1),
//     "bias" (0); buffers "running_mean" (0), "running_var" (1) and "num_batches_tracked" (i64
//     scalar), as torch.nn.BatchNorm2d. Training uses batch statistics and updates the running ones
//     (not again when gradient checkpointing recomputes the forward); eval uses the running ones.
//     A frozen BatchNorm2d (Module::is_frozen, set by freeze() when its weight and bias are frozen)
//     uses and keeps the running ones in training too, as torchvision's FrozenBatchNorm2d (the
//     gradient still flows to its input).
//   LocalResponseNorm: across channels, AlexNet (core/ops/lrn.h); no parameters.
// Tests: tests/layers/layers_test.cpp.
#pragma once
#include "layers/module.h"

namespace kiln {

struct BatchNormOptions {
  int64_t num_features = 0;  /// channels (required)
  double eps = 1e-5;         /// added to the variance (default 1e-5)
  double momentum = 0.1;     /// running = (1 - momentum) * running + momentum * batch (default 0.1)

  // `type` is "batch_norm2d" or "batch_norm1d" (kept for to_json).
  static BatchNormOptions from_json(const json& j, const std::string& path);
  json to_json(const std::string& type) const;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(const BatchNormOptions& o, const std::string& type = "batch_norm2d");
  Tensor forward(const Tensor& x) override;
  // relu(forward(x) + residual) (residual undefined: relu(forward(x))) through the fused op
  // (ops::batch_norm_relu): the ResNet blocks' "BN, add, ReLU" in one pass, bit for bit the same.
  Tensor forward_relu(const Tensor& x, const Tensor& residual = Tensor());
  json to_json() const override { return opts_.to_json(type()); }
  const BatchNormOptions& options() const { return opts_; }

  Tensor weight, bias;                                 // (C)
  Tensor running_mean, running_var, num_batches_tracked;  // (C), (C), i64 []

 private:
  Tensor run(const Tensor& x, bool relu, const Tensor& residual);
  BatchNormOptions opts_;
};

struct LocalResponseNormOptions {
  int64_t size = 0;     /// channels in the window (required; AlexNet uses 5)
  double alpha = 1e-4;  /// scale (default 1e-4)
  double beta = 0.75;   /// exponent (default 0.75)
  double k = 1.0;       /// additive constant (default 1; the original AlexNet used 2)

  static LocalResponseNormOptions from_json(const json& j, const std::string& path);
  json to_json() const;  // with "type": "local_response_norm"
};

class LocalResponseNorm : public Module {
 public:
  explicit LocalResponseNorm(const LocalResponseNormOptions& o);
  Tensor forward(const Tensor& x) override;
  json to_json() const override { return opts_.to_json(); }

 private:
  LocalResponseNormOptions opts_;
};

}  // namespace kiln
