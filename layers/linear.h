// Linear: y = x weight^T + bias, x (N, in), weight (out, in) as torch.nn.Linear ("weight", "bias").
// Flatten: (N, H, W, C) -> (N, C*H*W) in PyTorch's (c, h, w) order, as torch.flatten of an NCHW
// tensor; 2-D inputs pass through.
//
// kiln's activations are NHWC, so Flatten permutes them to (N, C, H, W) (one contiguous copy,
// recorded by autograd: the backward permutes the gradient back) before flattening. A Linear after
// it therefore has its weight's columns in torchvision's order: its weights cross to and from
// PyTorch unchanged (layers/interop.h), and no layer needs to know what feeds it.
// Tests: tests/layers/layers_test.cpp, tests/layers/interop_test.cpp.
#pragma once
#include <string>

#include "layers/module.h"

namespace kiln {

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

  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined

 private:
  LinearOptions opts_;
};

class Flatten : public Module {
 public:
  Flatten() : Module("flatten") {}
  Tensor forward(const Tensor& x) override;
  json to_json() const override { return {{"type", "flatten"}}; }
};

}  // namespace kiln
