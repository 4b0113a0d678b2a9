// Linear: y = x weight^T + bias, x (N, in), weight (out, in) as torch.nn.Linear ("weight", "bias").
// Flatten: (N, H, W, C) -> (N, H*W*C); 2-D inputs pass through.
//
// NOTE: kiln flattens NHWC activations, so the first Linear after a Flatten sees its input columns
// in (h, w, c) order where torchvision's sees (c, h, w). Such a Linear shares a FlattenedShape with
// the Flatten that feeds it, and layers/interop.h permutes the weight's columns when weights cross
// to or from PyTorch. Only the channel count matters for that permutation (column s*C + c <->
// c*HW + s, s = h*W + w), so it is known before any forward: a model sets it at construction, a
// Sequential takes it from the conv/BN/block before the Flatten, and each forward records it. Tests: tests/layers/layers_test.cpp, tests/layers/interop_test.cpp.
#pragma once
#include <memory>

#include "layers/module.h"

namespace kiln {

// The channel count C of the NHWC activation (N, H, W, C) that a Flatten turned into features
// (0 while unknown).
struct FlattenedShape {
  int64_t channels = 0;
  bool known() const { return channels > 0; }
};

struct LinearOptions {
  int64_t in_features = 0;   /// input features (required)
  int64_t out_features = 0;  /// output features (required)
  bool bias = true;          /// learn an additive bias (default true)
  /// "default": PyTorch's (weight kaiming_uniform a=sqrt(5), bias U(+-1/sqrt(in_features)));
  /// "normal": N(0, 0.01^2) weight and zero bias, as torchvision's VGG (default "default")
  std::string init = "default";

  static LinearOptions from_json(const json& j, const std::string& path);
  json to_json() const;  // with "type": "linear"
};

class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& o);
  Tensor forward(const Tensor& x) override;
  json to_json() const override { return opts_.to_json(); }
  const LinearOptions& options() const { return opts_; }

  // Marks the input as a flattened NHWC activation (shared with the Flatten that produces it).
  void set_flattened_input(std::shared_ptr<FlattenedShape> s) { flattened_ = std::move(s); }
  // Null when the input is not a flattened 4-D activation.
  const std::shared_ptr<FlattenedShape>& flattened_input() const { return flattened_; }

  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined

 private:
  LinearOptions opts_;
  std::shared_ptr<FlattenedShape> flattened_;
};

class Flatten : public Module {
 public:
  Flatten() : Module("flatten"), seen_(std::make_shared<FlattenedShape>()) {}
  Tensor forward(const Tensor& x) override;
  json to_json() const override { return {{"type", "flatten"}}; }
  // The channels of the last 4-D input (or as preset by a model or Sequential that knows them).
  const std::shared_ptr<FlattenedShape>& flattened_shape() const { return seen_; }

 private:
  std::shared_ptr<FlattenedShape> seen_;
};

}  // namespace kiln
