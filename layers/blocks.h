// Residual blocks of ResNet, with torchvision's child names so weights load by name:
//   BasicBlock  (expansion 1): conv1 3x3 (stride) - bn1 - relu - conv2 3x3 - bn2, + shortcut, relu
//   Bottleneck  (expansion 4): conv1 1x1 - bn1 - relu - conv2 3x3 (stride) - bn2 - relu - conv3 1x1
//               - bn3, + shortcut, relu. The stride sits on the 3x3 as in torchvision (ResNet v1.5).
// Shortcut when the shape changes (stride != 1 or in_channels != planes * expansion):
//   "B": projection, downsample = Sequential(conv 1x1 stride, BN) -> "downsample.0.weight", "downsample.1.*"
//   "A": parameter-free (He et al. 2015, CIFAR): subsample by the stride, zero-pad the channels
//        (half the new channels before, half after). BasicBlock only.
// Convs are bias-free with Kaiming-normal (fan_out) init, BNs weight 1 bias 0, as torchvision.
// Squeeze-and-excitation (opt-in, `se_reduction` r > 0; Hu et al. 2018, "Squeeze-and-Excitation
// Networks", fig. 3): the residual branch's output after its last BN is scaled per channel by
// sigmoid(fc2(relu(fc1(global_avg_pool(.))))) before the shortcut is added; fc1 C -> max(1, C / r),
// fc2 back to C, both with biases (child "se": "se.fc1.weight", ... as timm's SE-ResNets' names).
// Tests: tests/layers/layers_test.cpp.
#pragma once
#include <memory>

#include "layers/conv.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/sequential.h"

namespace kiln {

struct BlockOptions {
  int64_t in_channels = 0;  /// channels of the block's input (required)
  int64_t planes = 0;       /// block width; output channels = planes * expansion (required)
  int64_t stride = 1;       /// stride of the block (default 1)
  std::string shortcut = "B";       /// "B" projection or "A" zero-padding identity (default "B")
  bool zero_init_residual = false;  /// start the last BN's weight at 0, so the block starts as identity (default false)
  bool fused_bn_conv = false;  /// in training, run conv -> BN -> ReLU -> conv through the fused op (default false)
  int64_t se_reduction = 0;    /// squeeze-and-excitation on the residual branch with this reduction ratio; 0: none (default 0)
  // Not a JSON key: the builder's promise that every input of the block is >= 0 (it follows a ReLU, as
  // in every ResNet), which lets fused_bn_conv run conv1 through the fused op too (identity scale and
  // bias: relu(x) = x) and take its output's sums from the convolution's epilogue.
  bool input_after_relu = false;

  // `type` is "basic_block" or "bottleneck".
  static BlockOptions from_json(const json& j, const std::string& path, const std::string& type);
  json to_json(const std::string& type) const;
};

// Squeeze-and-excitation: x (N, H, W, C) times a per-sample, per-channel gate in (0, 1).
class SqueezeExcite : public Module {
 public:
  SqueezeExcite(int64_t channels, int64_t reduction);
  Tensor forward(const Tensor& x) override;  // x * gate(x), the gate broadcast over H and W
  Tensor gate(const Tensor& x);              // (N, C): sigmoid(fc2(relu(fc1(mean of x over H, W))))
  json to_json() const override;

  std::shared_ptr<Linear> fc1, fc2;
};

// sigmoid(z) from recorded ops: 1 / (1 + exp(-z)) with z first clamped to [-30, 30], so exp stays finite
// and no inf * 0 reaches the gradient (beyond +-30 the sigmoid is within 1e-13 of 0 or 1).
Tensor sigmoid(const Tensor& z);

// Shared shortcut logic of both blocks.
class ResidualBlock : public Module {
 public:
  ResidualBlock(const std::string& type, const BlockOptions& o, int64_t expansion);
  json to_json() const override { return opts_.to_json(type()); }
  const BlockOptions& options() const { return opts_; }
  int64_t out_channels() const { return opts_.planes * expansion_; }

  std::shared_ptr<SqueezeExcite> se;  // with se_reduction > 0 (child "se"), else null

 protected:
  // relu(bn(pre_bn) + shortcut(x)): the block's last batch norm, the shortcut and the final ReLU,
  // the last three fused (BatchNorm2d::forward_relu); with squeeze-and-excitation
  // relu(se(bn(pre_bn)) + shortcut(x)), the last three as ops::scale_add_relu.
  Tensor finish(const Tensor& pre_bn, BatchNorm2d& bn, const Tensor& x);
  // The shortcut's output for input x: x itself, the projection, or option A's subsample and zero-pad.
  Tensor shortcut(const Tensor& x);
  // A bias-free conv with Kaiming-normal init.
  static std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride);
  // Registers the squeeze-and-excitation (when asked for) and then the shortcut; call after the
  // residual branch so names come in torchvision's order.
  void make_shortcut();

  BlockOptions opts_;
  int64_t expansion_;
  std::shared_ptr<Sequential> downsample_;  // "B" when the shape changes
};

// With `fused_bn_conv` (as the Bottleneck's, below) a training forward whose bn1 is not frozen runs
// conv1 with its output's sums, bn1 as ops::bn_finalize, conv2 through the fused op (bn1's affine +
// ReLU in its prologue), then bn2 + shortcut + ReLU as without it.
class BasicBlock : public ResidualBlock {
 public:
  static constexpr int64_t kExpansion = 1;
  explicit BasicBlock(const BlockOptions& o);
  Tensor forward(const Tensor& x) override;
  bool fused_bn_conv() const { return opts_.fused_bn_conv; }

  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;

 private:
  Tensor forward_fused(const Tensor& x);
};

// With `fused_bn_conv` (opt-in, kiln issue #36 section 2, docs/cuda_backend.md "cuDNN runtime
// fusion") a training forward whose bn1 and bn2 are not frozen runs conv1 with its output's per-channel
// sums, bn1 as ops::bn_finalize (batch statistics from the sums -> scale, bias; running statistics),
// conv2 and conv3 through ops::conv_scale_bias_relu_stats_train (bn1's/bn2's affine + ReLU fused into
// the conv, the sums of its output with it), then bn3 + shortcut + ReLU as without it. With
// input_after_relu (the ResNet builder), conv1 runs through the same op with scale 1 and bias 0, so its
// sums come from the fused kernel too; its input's gradient is then 0 where x = 0, which changes
// nothing after the ReLU that made x (its gradient is 0 there). Same values,
// gradients and running statistics as the plain path up to f32 rounding (var = E[y^2] - mean^2);
// eval mode, frozen BNs and the default take the plain path.
class Bottleneck : public ResidualBlock {
 public:
  static constexpr int64_t kExpansion = 4;
  explicit Bottleneck(const BlockOptions& o);
  Tensor forward(const Tensor& x) override;
  bool fused_bn_conv() const { return opts_.fused_bn_conv; }

  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;

 private:
  Tensor forward_fused(const Tensor& x);
};

}  // namespace kiln
