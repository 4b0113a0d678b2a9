// VGG (Simonyan & Zisserman 2014) with torchvision's layout and names: features (3x3 convs, pad 1,
// with BN after each when batch_norm, ReLU, maxpool 2/2 between stages), avgpool adaptive 7x7,
// classifier: linear 25088->4096, ReLU, dropout, linear 4096->4096, ReLU, dropout, linear -> num_classes.
// Depths 11, 13, 16, 19 (configs A, B, D, E); names "vgg16", "vgg16_bn", ...
// Init as torchvision: convs Kaiming normal (fan_out) with zero bias, BN 1/0, linears N(0, 0.01) with
// zero bias. Parameters at 1000 classes: vgg11 132,863,336, vgg16 138,357,544 (_bn: +5,504 / +8,448).
// Tests: tests/models/models_test.cpp.
#pragma once
#include "models/common.h"

namespace kiln::models {

struct VGGOptions {
  int64_t depth = 16;        // 11, 13, 16 or 19 (set by the model name)
  bool batch_norm = false;   // BN after each conv (set by the model name: "_bn")
  CommonOptions common{3, 1000, "none"};  // keys in_channels (default 3), num_classes (default 1000), checkpoint
  double dropout = 0.5;      /// dropout in the classifier (default 0.5)

  // The depth and batch_norm come from `name` ("vgg11", "vgg16_bn", ...).
  static VGGOptions from_json(const json& j, const std::string& path, const std::string& name);
  std::string name() const;
  json to_json() const;
};

class VGG : public FeatureClassifier {
 public:
  explicit VGG(const VGGOptions& o);
  json to_json() const override { return opts_.to_json(); }

 private:
  VGGOptions opts_;
};

}  // namespace kiln::models
