// Conv2d: y = conv(x, weight) + bias on NHWC activations; weight (out, kh, kw, in/groups), as
// core/ops/conv2d.h. Parameter names as torch.nn.Conv2d: "weight", "bias".
// Tests: tests/layers/layers_test.cpp.
#pragma once
#include "layers/module.h"

namespace kiln {

struct Conv2dOptions {
  int64_t in_channels = 0;   /// input channels (required)
  int64_t out_channels = 0;  /// output channels (required)
  int64_t kernel_size = 0;   /// side of the square kernel (required)
  int64_t stride = 1;        /// stride (default 1)
  int64_t padding = 0;       /// zero padding on each side (default 0)
  int64_t dilation = 1;      /// dilation (default 1)
  int64_t groups = 1;        /// groups; in_channels and out_channels must be multiples (default 1)
  bool bias = true;          /// learn an additive bias (default true)
  /// "default": PyTorch's (weight kaiming_uniform a=sqrt(5), bias U(+-1/sqrt(fan_in)));
  /// "kaiming_normal": N(0, 2/fan_out) as torchvision's ResNet/VGG, bias 0 (default "default")
  std::string init = "default";

  static Conv2dOptions from_json(const json& j, const std::string& path);
  json to_json() const;  // with "type": "conv2d"
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& o);
  Tensor forward(const Tensor& x) override;
  json to_json() const override { return opts_.to_json(); }
  const Conv2dOptions& options() const { return opts_; }

  Tensor weight;  // (out, k, k, in/groups)
  Tensor bias;    // (out) or undefined

 private:
  Conv2dOptions opts_;
};

}  // namespace kiln
