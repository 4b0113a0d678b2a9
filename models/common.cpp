#include "models/common.h"

#include "layers/options.h"

namespace kiln::models {

void CommonOptions::read(JsonReader& r) {
  in_channels = r.get("in_channels", in_channels, int64_t{1}, kMaxSize);
  num_classes = r.get("num_classes", num_classes, int64_t{1}, kMaxSize);
  checkpoint = r.get("checkpoint", checkpoint);
  RecomputePolicy::parse(checkpoint, r.path_of("checkpoint"));
}

void CommonOptions::write(json& j) const {
  j["in_channels"] = in_channels;
  j["num_classes"] = num_classes;
  j["checkpoint"] = checkpoint;
}

void check_image_input(const std::string& model, const Tensor& x, int64_t in_channels) {
  KILN_CHECK(x.dim() == 4 && x.size(3) == in_channels, model, ": input ", x.str(), " must be NHWC images (N, H, W, ",
             in_channels, ")");
}

std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, bool bias,
                             const std::string& init) {
  Conv2dOptions o;
  o.in_channels = in;
  o.out_channels = out;
  o.kernel_size = kernel;
  o.stride = stride;
  o.padding = padding;
  o.bias = bias;
  o.init = init;
  return std::make_shared<Conv2d>(o);
}

std::shared_ptr<BatchNorm2d> batch_norm(int64_t c) {
  BatchNormOptions o;
  o.num_features = c;
  return std::make_shared<BatchNorm2d>(o);
}

std::shared_ptr<ReLU> relu() { return std::make_shared<ReLU>(); }

std::shared_ptr<MaxPool2d> max_pool(int64_t kernel, int64_t stride, int64_t padding) {
  Pool2dOptions o;
  o.kernel_size = kernel;
  o.stride = stride;
  o.padding = padding;
  return std::make_shared<MaxPool2d>(o);
}

std::shared_ptr<Dropout> dropout(double p) {
  DropoutOptions o;
  o.p = p;
  return std::make_shared<Dropout>(o);
}

std::shared_ptr<Linear> linear(int64_t in, int64_t out, const std::string& init) {
  LinearOptions o;
  o.in_features = in;
  o.out_features = out;
  o.init = init;
  return std::make_shared<Linear>(o);
}

FeatureClassifier::FeatureClassifier(const std::string& name, const CommonOptions& common)
    : Module(name), common_(common), flatten_(std::make_shared<Flatten>()), policy_(common.policy()) {}

void FeatureClassifier::finish_build(int64_t c, int64_t h, int64_t w) {
  KILN_CHECK(features_ && classifier_, type(), ": features and classifier must be built first");
  built_for_c_ = c;
  built_for_h_ = h;
  built_for_w_ = w;
  units_ = split_units(features_->layers());
}

Tensor FeatureClassifier::forward(const Tensor& x) {
  check_image_input(type(), x, common_.in_channels);
  Tensor h = run_units(units_, x, policy_);
  if (avgpool_) h = avgpool_->forward(h);
  KILN_CHECK(h.size(1) == built_for_h_ && h.size(2) == built_for_w_, type(), ": input ", x.str(), " gives features ",
             h.str(), " but the classifier was built for (H, W, C) = (", built_for_h_, ", ", built_for_w_, ", ",
             built_for_c_, "); check the input image size");
  return classifier_->forward(flatten_->forward(h));
}

}  // namespace kiln::models
