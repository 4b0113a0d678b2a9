// AlexNet with torchvision's layout and names (features.N, avgpool, classifier.N):
//   features: conv 11x11/4 in->64 (pad 2), ReLU, maxpool 3/2, conv 5x5 64->192 (pad 2), ReLU,
//             maxpool 3/2, conv 3x3 192->384, ReLU, conv 384->256, ReLU, conv 256->256, ReLU, maxpool 3/2
//   avgpool:  adaptive 6x6
//   classifier: dropout, linear 9216->4096, ReLU, dropout, linear 4096->4096, ReLU, linear -> num_classes
// 61,100,840 parameters at 1000 classes (as torchvision).
// "lrn": true builds the original network (Krizhevsky et al. 2012) instead: widths 96-256-384-384-256
// and LocalResponseNorm(size 5, alpha 1e-4, beta 0.75, k 2) after the first two ReLUs (so the
// feature indices shift); no grouped convolutions. PyTorch default initialisation throughout.
// Tests: tests/models/models_test.cpp.
#pragma once
#include "models/common.h"

namespace kiln::models {

struct AlexNetOptions {
  CommonOptions common{3, 1000, "none"};  // keys in_channels (default 3), num_classes (default 1000), checkpoint
  double dropout = 0.5;                   /// dropout in the classifier (default 0.5)
  bool lrn = false;                       /// the original LRN variant (default false: torchvision's)

  static AlexNetOptions from_json(const json& j, const std::string& path);
  json to_json() const;  // {"name": "alexnet", ...}
};

class AlexNet : public FeatureClassifier {
 public:
  explicit AlexNet(const AlexNetOptions& o);
  json to_json() const override { return opts_.to_json(); }

 private:
  AlexNetOptions opts_;
};

}  // namespace kiln::models
