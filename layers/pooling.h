// Pooling layers on NHWC activations (core/ops/pool.h); none has parameters.
//   MaxPool2d, AvgPool2d: square windows, PyTorch's output sizes (ceil_mode, count_include_pad).
//   AdaptiveAvgPool2d: PyTorch's bins to a square output_size x output_size (keeps 4-D).
//   GlobalAvgPool: (N, H, W, C) -> (N, C), the mean over H and W (ResNet's head, no flatten needed).
// Tests: tests/layers/layers_test.cpp.
#pragma once
#include "core/ops/pool.h"
#include "layers/module.h"

namespace kiln {

struct Pool2dOptions {
  int64_t kernel_size = 0;         /// side of the square window (required)
  int64_t stride = 0;              /// stride; 0 means kernel_size, PyTorch's default (default 0)
  int64_t padding = 0;             /// implicit padding on each side (default 0)
  bool ceil_mode = false;          /// round output sizes up (default false)
  bool count_include_pad = true;   /// avg_pool2d only: padded zeros count in the mean (default true)

  // `type` is "max_pool2d" or "avg_pool2d" (count_include_pad only for the latter).
  static Pool2dOptions from_json(const json& j, const std::string& path, const std::string& type);
  json to_json(const std::string& type) const;
  ops::Pool2dParams params() const;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const Pool2dOptions& o);
  Tensor forward(const Tensor& x) override { return ops::max_pool2d(x, opts_.params()); }
  json to_json() const override { return opts_.to_json(type()); }

 private:
  Pool2dOptions opts_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const Pool2dOptions& o);
  Tensor forward(const Tensor& x) override { return ops::avg_pool2d(x, opts_.params()); }
  json to_json() const override { return opts_.to_json(type()); }

 private:
  Pool2dOptions opts_;
};

struct AdaptiveAvgPool2dOptions {
  int64_t output_size = 1;  /// side of the square output (default 1)

  static AdaptiveAvgPool2dOptions from_json(const json& j, const std::string& path);
  json to_json() const;  // with "type": "adaptive_avg_pool2d"
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(const AdaptiveAvgPool2dOptions& o);
  Tensor forward(const Tensor& x) override;
  json to_json() const override { return opts_.to_json(); }

 private:
  AdaptiveAvgPool2dOptions opts_;
};

class GlobalAvgPool : public Module {
 public:
  GlobalAvgPool() : Module("global_avg_pool") {}
  Tensor forward(const Tensor& x) override { return ops::global_avg_pool(x); }
  json to_json() const override { return {{"type", "global_avg_pool"}}; }
};

}  // namespace kiln
