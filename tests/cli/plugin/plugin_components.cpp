// A program's own components, one of each family, registered with KILN_REGISTER as a user would
// (docs/library.md): built into the static library kiln_test_plugin, which kiln_test_cli links whole
// ($<LINK_LIBRARY:WHOLE_ARCHIVE,...>) and kiln_test_plugin_unlinked links plainly (its registrations
// are then dropped by the linker: tests/CMakeLists.txt checks the hint that names it).
//   model "plugin_net" {width, in_features, num_classes}: flatten, linear, relu, linear
//   model "broken_net": its maker throws (the error names it and the config key)
//   layer "scale" {factor}: y = factor * x
//   transform "invert": 255 - pixel
//   optimizer "plain_sgd" {lr}: SGD without momentum
//   schedule "halving": the lr halves every epoch
//   data source "stripes" {stripes_size}: 8x8x3 images whose label (0..3) is the row that is lit
#include <memory>

#include "core/ops/elementwise.h"
#include "core/registry.h"
#include "data/config.h"
#include "data/pipeline.h"
#include "layers/activation.h"
#include "layers/linear.h"
#include "layers/registry.h"
#include "models/registry.h"
#include "optim/registry.h"
#include "optim/sgd.h"

namespace plugin {

using kiln::json;
using kiln::JsonReader;

struct NetOptions {
  int64_t width = 16, in_features = 192, num_classes = 4;
  static NetOptions from_json(const json& j, const std::string& path) {
    NetOptions o;
    JsonReader r(j, path);
    r.allow("name");
    o.width = r.get("width", o.width, 1, 4096);
    o.in_features = r.get("in_features", o.in_features, 1, 1 << 24);
    o.num_classes = r.get("num_classes", o.num_classes, 2, 1000);
    r.finish();
    return o;
  }
};

class PluginNet : public kiln::Sequential {
 public:
  explicit PluginNet(NetOptions o) : Sequential("plugin_net"), o_(o) {
    push_back(std::make_shared<kiln::Flatten>());
    push_back(std::make_shared<kiln::Linear>(kiln::LinearOptions{o.in_features, o.width}));
    push_back(std::make_shared<kiln::ReLU>());
    push_back(std::make_shared<kiln::Linear>(kiln::LinearOptions{o.width, o.num_classes}));
  }
  json to_json() const override {
    return {{"name", "plugin_net"}, {"width", o_.width}, {"in_features", o_.in_features}, {"num_classes", o_.num_classes}};
  }

 private:
  NetOptions o_;
};

KILN_REGISTER(kiln::models::register_model(
    "plugin_net", [](const json& j, const std::string& path) { return std::make_shared<PluginNet>(NetOptions::from_json(j, path)); },
    {.summary = "a two-layer perceptron of the test plugin",
     .keys = {{"width", "hidden units of the plugin's perceptron"},
              {"in_features", "inputs: height x width x channels of the images"},
              {"num_classes", "classes of the last layer"}}}));

KILN_REGISTER(kiln::models::register_model("broken_net", [](const json&, const std::string&) -> std::shared_ptr<kiln::Module> {
  throw std::runtime_error("the broken net cannot be built");
}));

class Scale : public kiln::Module {
 public:
  explicit Scale(double factor) : Module("scale"), factor_(factor) {}
  kiln::Tensor forward(const kiln::Tensor& x) override { return kiln::ops::mul_scalar(x, factor_); }
  json to_json() const override { return {{"type", "scale"}, {"factor", factor_}}; }

 private:
  double factor_;
};

KILN_REGISTER(kiln::register_layer(
    "scale",
    [](const json& j, const std::string& path) {
      JsonReader r(j, path);
      r.allow("type");
      const double factor = r.get("factor", 1.0, -1e6, 1e6);
      r.finish();
      return std::make_shared<Scale>(factor);
    },
    {.keys = {{"factor", "the factor the input is multiplied by"}}}));

class Invert : public kiln::Transform {
 public:
  std::string type() const override { return "invert"; }
  kiln::Json to_json() const override { return {{"type", "invert"}}; }
  kiln::ImageShape output_shape(kiln::ImageShape in) const override { return in; }
  void apply(kiln::Image& img, kiln::SampleRng&, kiln::Image&) const override {
    for (int64_t i = 0; i < img.numel(); ++i) img.bytes[static_cast<size_t>(i)] = 255 - img.bytes[static_cast<size_t>(i)];
  }
};

KILN_REGISTER(kiln::register_transform("invert", [](const kiln::Json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("type");
  r.finish();
  return std::make_shared<const Invert>();
}));

// SGD without momentum under its own name: to_json() names "plain_sgd", so a run's config.json rebuilds it.
class PlainSGD : public kiln::SGD {
 public:
  using SGD::SGD;
  json to_json() const override {
    const json sgd = SGD::to_json();
    json j = {{"name", "plain_sgd"}, {"lr", sgd.at("lr")}};
    if (sgd.contains("lr_mult")) j["lr_mult"] = sgd["lr_mult"];
    return j;
  }
};

KILN_REGISTER(kiln::register_optimizer(
    "plain_sgd",
    [](const json& j, std::vector<kiln::ParamRef> params, const std::string& path) -> std::unique_ptr<kiln::Optimizer> {
      JsonReader r(j, path);
      r.allow("name");
      kiln::SGDOptions o;
      o.momentum = 0;
      o.lr = r.get("lr", 0.1, 0.0, 10.0);
      r.finish();
      return std::make_unique<PlainSGD>(std::move(params), o);
    },
    {.keys = {{"lr", "the learning rate of plain SGD"}}}));

class Halving : public kiln::LrSchedule {
 public:
  explicit Halving(const kiln::ScheduleContext& c) : LrSchedule(c, kiln::WarmupOptions{}) {}
  json to_json() const override { return {{"name", "halving"}}; }

 protected:
  double main_lr(int64_t step) const override { return context_.base_lr / static_cast<double>(int64_t{1} << epoch_of(step)); }
};

KILN_REGISTER(kiln::register_schedule("halving", [](const json& j, const kiln::ScheduleContext& c, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  r.finish();
  return std::make_unique<Halving>(c);
}));

class Stripes : public kiln::Dataset {
 public:
  Stripes(int64_t size, kiln::Split split) : size_(size), split_(split) {}
  int64_t size() const override { return size_; }
  int64_t num_classes() const override { return 4; }
  kiln::ImageShape image_shape() const override { return {8, 8, 3}; }
  std::string name() const override { return std::string("stripes ") + kiln::split_name(split_); }
  void get_into(int64_t index, kiln::Sample& out) const override {
    KILN_CHECK(index >= 0 && index < size_, name(), ": index ", index, " out of range");
    out.label = index % 4;
    out.image.resize(8, 8, 3);
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 8; ++x)
        for (int64_t c = 0; c < 3; ++c)
          out.image.bytes[static_cast<size_t>((y * 8 + x) * 3 + c)] = y / 2 == out.label ? 250 : (index * 7 + x) % 40;
  }

 private:
  int64_t size_;
  kiln::Split split_;
};

KILN_REGISTER(kiln::register_data_source(
    "stripes",
    {.keys = {"stripes_size"},
     .read = [](JsonReader& data) { return json{{"stripes_size", data.get("stripes_size", int64_t{64}, 4, 1 << 20)}}; },
     .shape = [](const json&) { return kiln::ImageShape{8, 8, 3}; },
     .open = [](const json& o, kiln::Split split) -> std::shared_ptr<const kiln::Dataset> {
       return std::make_shared<Stripes>(o.at("stripes_size").get<int64_t>(), split);
     }},
    {.summary = "8x8 images of four lit rows (the test plugin's)",
     .keys = {{"stripes_size", "images per split of the stripes source"}}}));

}  // namespace plugin
