// Pieces shared by the models: the options every classifier has, and short builders for the layers
// they stack (so a model file reads like torchvision's). Tests: tests/models/models_test.cpp.
#pragma once
#include <memory>
#include <string>

#include "layers/activation.h"
#include "layers/recompute.h"
#include "layers/conv.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/pooling.h"
#include "layers/sequential.h"

namespace kiln::models {

struct CommonOptions {
  int64_t in_channels = 3;         /// channels of the input images (default: the model's, 3 or 1)
  int64_t num_classes = 1000;      /// classes (default: the model's, 1000 or 10)
  std::string checkpoint = "none";  /// gradient checkpointing: "none" | "blocks" | "every:K" (layers/recompute.h)

  // Reads the three keys (defaults as given in *this); validates checkpoint.
  void read(JsonReader& r);
  void write(json& j) const;
  RecomputePolicy policy(const std::string& path = "model.checkpoint") const {
    return RecomputePolicy::parse(checkpoint, path);
  }
};

// Throws unless x is (N, H, W, in_channels), naming the model.
void check_image_input(const std::string& model, const Tensor& x, int64_t in_channels);

std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, bool bias,
                             const std::string& init = "default");
std::shared_ptr<BatchNorm2d> batch_norm(int64_t c);
std::shared_ptr<ReLU> relu();
std::shared_ptr<MaxPool2d> max_pool(int64_t kernel, int64_t stride, int64_t padding = 0);
std::shared_ptr<Dropout> dropout(double p);
std::shared_ptr<Linear> linear(int64_t in, int64_t out, const std::string& init = "default");

// features -> [avgpool] -> flatten -> classifier: the shape of LeNet, AlexNet and VGG, with
// torchvision's child names. `features` runs as checkpoint units (its stages, split after each pooling).
// The flatten gives PyTorch's (c, h, w) order (layers/linear.h), so the classifier's weights are
// torchvision's as they are.
class FeatureClassifier : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  const Sequential& features() const { return *features_; }
  const Sequential& classifier() const { return *classifier_; }

 protected:
  FeatureClassifier(const std::string& name, const CommonOptions& common);
  // Call once features, avgpool (optional) and classifier are registered: (c, h, w) is the
  // activation the classifier is built for (forward names it when an input gives another size).
  void finish_build(int64_t c, int64_t h, int64_t w);

  CommonOptions common_;
  std::shared_ptr<Sequential> features_, classifier_;
  std::shared_ptr<AdaptiveAvgPool2d> avgpool_;  // null when the model has none

 private:
  std::shared_ptr<Flatten> flatten_;  // not a child: torchvision flattens in forward()
  int64_t built_for_c_ = 0, built_for_h_ = 0, built_for_w_ = 0;  // the features the classifier takes
  std::vector<Unit> units_;
  RecomputePolicy policy_;
};

}  // namespace kiln::models
