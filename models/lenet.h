// LeNet-style CNN for small grey images (the default model; Fashion-MNIST, MNIST):
//   features:   0 conv 3x3 in->32 (pad 1, no bias) 1 BN 2 maxpool 2 3 ReLU
//               4 conv 3x3 32->64 (pad 1, no bias) 5 BN 6 maxpool 2 7 ReLU
//   classifier: 0 linear 64*(S/4)^2 -> 128  1 ReLU  2 dropout  3 linear 128 -> num_classes
// for input_size S (28: 7x7x64 = 3136 features). Convs carry no bias (the BN after them has one).
// The ReLU comes after the max-pool: the two commute (max is monotonic), so this is the usual
// conv-BN-ReLU-pool network with a quarter of the ReLU work.
// About 4.2 M multiply-adds per 28x28 image forward: small enough to train three epochs of
// Fashion-MNIST on two CPU cores in minutes. Checked with the same network in PyTorch (batch 64,
// inputs normalised, 3 epochs, one seed): AdamW + one-cycle (max lr 3e-3, wd 1e-4) 91.8% test
// accuracy, SGD Nesterov 0.9 + one-cycle (max lr 0.1, wd 5e-4) 91.7%; with dropout 0.5 instead of
// 0.25, AdamW reached only 91.0%: three epochs are too short for heavy dropout.
// Tests: tests/models/models_test.cpp.
#pragma once
#include "models/common.h"

namespace kiln::models {

struct LeNetOptions {
  CommonOptions common{1, 10, "none"};  // keys in_channels (default 1), num_classes (default 10), checkpoint
  int64_t input_size = 28;              /// side of the square input images (default 28)
  double dropout = 0.25;                /// dropout before the last linear layer (default 0.25)

  static LeNetOptions from_json(const json& j, const std::string& path);
  json to_json() const;  // {"name": "lenet", ...}
};

class LeNet : public FeatureClassifier {
 public:
  explicit LeNet(const LeNetOptions& o);
  json to_json() const override { return opts_.to_json(); }

 private:
  LeNetOptions opts_;
};

}  // namespace kiln::models
