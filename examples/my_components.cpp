// A model and a transform of a program's own, registered with kiln (docs/library.md, "Registering your
// components"): a config then names them like kiln's own, and kiln's engine trains them with everything
// a built-in gets (checkpoints, resume, signals, AMP, gradient checkpointing, AutoBatch, reports, ONNX).
// Linked into engine_model (example b) and user_kiln (example c) as an object library: an object file
// linked directly keeps its KILN_REGISTER lines (a static library needs linking whole, core/registry.h).
//   model "tiny_cnn" {"width": 16, "num_classes": 10, "checkpoint": "none"}: two conv-BN-ReLU-pool units and
//     a linear classifier, for 28x28 grey images (Fashion-MNIST);
//   transform "random_invert" {"p": 0.5}: inverts an image's pixels with probability p.
#include <kiln/core/registry.h>
#include <kiln/data/pipeline.h>
#include <kiln/layers/activation.h>
#include <kiln/layers/conv.h>
#include <kiln/layers/linear.h>
#include <kiln/layers/norm.h>
#include <kiln/layers/pooling.h>
#include <kiln/layers/recompute.h>
#include <kiln/models/registry.h>

namespace {

using kiln::json;

struct TinyCnnOptions {
  int64_t width = 16, num_classes = 10;
  std::string checkpoint = "none";

  // Read like kiln's own options: a wrong type, a value out of range or a misspelt key is refused naming it.
  static TinyCnnOptions from_json(const json& j, const std::string& path) {
    TinyCnnOptions o;
    kiln::JsonReader r(j, path);
    r.allow("name");
    o.width = r.get("width", o.width, 1, 512);
    o.num_classes = r.get("num_classes", o.num_classes, 2, 100000);
    o.checkpoint = r.get("checkpoint", o.checkpoint);
    r.finish();
    kiln::RecomputePolicy::parse(o.checkpoint, r.path_of("checkpoint"));  // "none", "blocks" or "every:K"
    return o;
  }
  json to_json() const {
    return {{"name", "tiny_cnn"}, {"width", width}, {"num_classes", num_classes}, {"checkpoint", checkpoint}};
  }
};

// A Sequential of kiln's layers run in order: ONNX export takes it as it is. Its units (each conv stage)
// are what train.checkpoint = "blocks" recomputes in backward.
class TinyCnn : public kiln::Sequential {
 public:
  explicit TinyCnn(const TinyCnnOptions& o)
      : Sequential("tiny_cnn"), o_(o), policy_(kiln::RecomputePolicy::parse(o.checkpoint, "model.checkpoint")) {
    int64_t in = 1;
    for (int64_t out : {o.width, 2 * o.width}) {
      push_back(std::make_shared<kiln::Conv2d>(kiln::Conv2dOptions{.in_channels = in, .out_channels = out,
                                                                   .kernel_size = 3, .padding = 1, .bias = false}));
      push_back(std::make_shared<kiln::BatchNorm2d>(kiln::BatchNormOptions{.num_features = out}));
      push_back(std::make_shared<kiln::ReLU>());
      push_back(std::make_shared<kiln::MaxPool2d>(kiln::Pool2dOptions{.kernel_size = 2}));
      in = out;
    }
    push_back(std::make_shared<kiln::Flatten>());
    push_back(std::make_shared<kiln::Linear>(kiln::LinearOptions{.in_features = in * 7 * 7, .out_features = o.num_classes}));
    units_ = kiln::split_units(layers());  // a unit ends after each pooling layer
  }
  kiln::Tensor forward(const kiln::Tensor& x) override { return kiln::run_units(units_, x, policy_); }
  json to_json() const override { return o_.to_json(); }  // rebuilds it: resume, predict and export use it

 private:
  TinyCnnOptions o_;
  kiln::RecomputePolicy policy_;
  std::vector<kiln::Unit> units_;
};

KILN_REGISTER(kiln::models::register_model(
    "tiny_cnn",
    [](const json& j, const std::string& path) { return std::make_shared<TinyCnn>(TinyCnnOptions::from_json(j, path)); },
    {.summary = "two conv-BN-ReLU-pool stages and a linear classifier for 28x28 grey images (examples/my_components.cpp)",
     .keys = {{"width", "channels of the first stage; the second has twice as many"},
              {"num_classes", "classes of the classifier"},
              {"checkpoint", "gradient checkpointing of the two stages: \"none\", \"blocks\" or \"every:K\""}}}));

class RandomInvert : public kiln::Transform {
 public:
  explicit RandomInvert(double p) : p_(p) {}
  std::string type() const override { return "random_invert"; }
  kiln::Json to_json() const override { return {{"type", "random_invert"}, {"p", p_}}; }
  kiln::ImageShape output_shape(kiln::ImageShape in) const override { return in; }
  int64_t min_input_side(int64_t need) const override { return need; }  // recolours only
  void apply(kiln::Image& img, kiln::SampleRng& rng, kiln::Image&) const override {
    if (rng.uniform() >= p_) return;
    for (int64_t i = 0; i < img.numel(); ++i) img.bytes[static_cast<size_t>(i)] = 255 - img.bytes[static_cast<size_t>(i)];
  }

 private:
  double p_;
};

KILN_REGISTER(kiln::register_transform(
    "random_invert",
    [](const kiln::Json& j, const std::string& path) {
      kiln::JsonReader r(j, path);
      r.allow("type");
      const double p = r.get("p", 0.5, 0.0, 1.0);
      r.finish();
      return std::make_shared<const RandomInvert>(p);
    },
    {.summary = "inverts an image's pixels (255 - v) with probability p (examples/my_components.cpp)",
     .keys = {{"p", "the probability of inverting an image"}}}));

}  // namespace
