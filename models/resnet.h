// ResNets with torchvision's names (conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, fc):
//   ImageNet ("resnet18", "resnet34" basic blocks; "resnet50", "resnet101", "resnet152" bottlenecks):
//     stem conv 7x7/2 in->64, BN, ReLU, maxpool 3/2 (pad 1); four stages of widths 64-128-256-512
//     (stride 2 from the second; ResNet v1.5: the stride sits on the bottleneck's 3x3); global average
//     pool; fc. `"stem": "cifar"` replaces the stem by a 3x3/1 conv without maxpool (the ResNet-18 that
//     CIFAR benchmarks use on 32x32 input; same names, conv1.weight is 64x3x3x3). Shortcut B (projection) where the shape changes. resnet18 has 11,689,512 parameters,
//     resnet50 25,557,032 (1000 classes, as torchvision).
//   CIFAR (He et al. 2015, sec. 4.2; "resnet20", "resnet32", "resnet44", "resnet56", "resnet110", or
//     "resnet_cifar" with any depth = 6n+2): stem conv 3x3 in->16, BN, ReLU; three stages of n basic
//     blocks, widths 16-32-64 (scaled by width/16), stride 2 from the second; global average pool; fc.
//     Shortcut "A" by default (the paper's CIFAR choice: subsample and zero-pad channels, no
//     parameters; resnet20 then has 269,722 parameters) or "B" (1x1 projection + BN).
//   Either layout with `se_reduction` r > 0: an SE-ResNet (layers/blocks.h, SqueezeExcite in every block).
// Init as torchvision: convs Kaiming normal (fan_out), BN 1/0, fc PyTorch default.
// Checkpoint units are the residual blocks (the stem and head always run plainly).
// Tests: tests/models/models_test.cpp, tests/models/golden_test.cpp.
#pragma once
#include "layers/blocks.h"
#include "models/common.h"

namespace kiln::models {

struct ResNetOptions {
  std::string name = "resnet50";    /// model name; sets depth and the ImageNet/CIFAR layout
  int64_t depth = 50;               /// ImageNet 18/34/50/101/152; CIFAR 6n+2 ("resnet_cifar" only, default 20)
  bool cifar = false;               // the CIFAR layout (set by the name)
  std::string stem = "imagenet";    /// ImageNet depths only: "imagenet" (7x7/2 conv + maxpool, default) or
                                    /// "cifar" (3x3/1 conv, no maxpool: the usual CIFAR ResNet-18 for 32x32 input)
  int64_t width = 64;               /// CIFAR only: channels of the first stage (default 16)
  std::string shortcut = "B";       /// CIFAR only: "A" (default) or "B"; ImageNet always "B"
  bool zero_init_residual = false;  /// start each block's last BN weight at 0 (default false)
  int64_t se_reduction = 0;         /// squeeze-and-excitation in every block with this reduction ratio (SE-ResNet; 16 in the SE paper); 0: none (default 0)
  bool fused_bn_conv = false;       /// ImageNet layouts (resnet18..resnet152), not the CIFAR ones: in training, each block's conv -> BN -> ReLU -> conv through the fused op (default false)
  CommonOptions common{3, 1000, "none"};  // keys in_channels (default 3), num_classes (1000 ImageNet, 10 CIFAR), checkpoint

  static ResNetOptions from_json(const json& j, const std::string& path, const std::string& name);
  json to_json() const;
};

// Whether `name` is one of the CIFAR-layout ResNets (resnet20 ... resnet110, resnet_cifar), which take
// width/shortcut, not stem.
bool is_cifar_resnet(const std::string& name);

class ResNet : public Module {
 public:
  explicit ResNet(const ResNetOptions& o);
  Tensor forward(const Tensor& x) override;
  json to_json() const override { return opts_.to_json(); }
  // Every residual block, in order (the checkpoint units).
  std::vector<std::shared_ptr<ResidualBlock>> blocks() const;

 private:
  ResNetOptions opts_;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::shared_ptr<MaxPool2d> maxpool_;  // ImageNet only
  std::vector<std::shared_ptr<Sequential>> stages_;
  std::shared_ptr<GlobalAvgPool> avgpool_;
  std::shared_ptr<Linear> fc_;
  std::vector<Unit> units_;
  RecomputePolicy policy_;
};

}  // namespace kiln::models
