// Parameter-free elementwise layers: ReLU and Dropout (inverted; identity in eval).
// Tests: tests/layers/layers_test.cpp.
#pragma once
#include "layers/module.h"

namespace kiln {

class ReLU : public Module {
 public:
  ReLU() : Module("relu") {}
  Tensor forward(const Tensor& x) override;
  json to_json() const override { return {{"type", "relu"}}; }
};

// SiLU (swish): x * sigmoid(x), ops::silu (core/ops/silu.h); the activation of MobileNetV3/EfficientNet.
class SiLU : public Module {
 public:
  SiLU() : Module("silu") {}
  Tensor forward(const Tensor& x) override;
  json to_json() const override { return {{"type", "silu"}}; }
};

struct DropoutOptions {
  double p = 0.5;  /// probability of zeroing an element in training (default 0.5)

  static DropoutOptions from_json(const json& j, const std::string& path);
  json to_json() const;  // with "type": "dropout"
};

class Dropout : public Module {
 public:
  explicit Dropout(const DropoutOptions& o);
  Tensor forward(const Tensor& x) override;
  json to_json() const override { return opts_.to_json(); }

 private:
  DropoutOptions opts_;
};

}  // namespace kiln
