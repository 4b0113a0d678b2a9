#include "models/registry.h"

#include <functional>

#include "core/registry.h"
#include "layers/registry.h"
#include "models/alexnet.h"
#include "models/lenet.h"
#include "models/resnet.h"
#include "models/vgg.h"

namespace kiln::models {

namespace {
using ModelFactory = std::function<std::shared_ptr<Module>(const json&, const std::string&)>;

ModelFactory vgg(const std::string& name) {
  return [name](const json& j, const std::string& p) { return std::make_shared<VGG>(VGGOptions::from_json(j, p, name)); };
}
ModelFactory resnet(const std::string& name) {
  return [name](const json& j, const std::string& p) {
    return std::make_shared<ResNet>(ResNetOptions::from_json(j, p, name));
  };
}

const Registry<ModelFactory>& registry() {
  static const Registry<ModelFactory> r("a model", {
      {"lenet", [](const json& j, const std::string& p) { return std::make_shared<LeNet>(LeNetOptions::from_json(j, p)); }},
      {"alexnet", [](const json& j, const std::string& p) { return std::make_shared<AlexNet>(AlexNetOptions::from_json(j, p)); }},
      {"vgg11", vgg("vgg11")},
      {"vgg11_bn", vgg("vgg11_bn")},
      {"vgg13", vgg("vgg13")},
      {"vgg13_bn", vgg("vgg13_bn")},
      {"vgg16", vgg("vgg16")},
      {"vgg16_bn", vgg("vgg16_bn")},
      {"vgg19", vgg("vgg19")},
      {"vgg19_bn", vgg("vgg19_bn")},
      {"resnet18", resnet("resnet18")},
      {"resnet34", resnet("resnet34")},
      {"resnet50", resnet("resnet50")},
      {"resnet101", resnet("resnet101")},
      {"resnet152", resnet("resnet152")},
      {"resnet20", resnet("resnet20")},
      {"resnet32", resnet("resnet32")},
      {"resnet44", resnet("resnet44")},
      {"resnet56", resnet("resnet56")},
      {"resnet110", resnet("resnet110")},
      {"resnet_cifar", resnet("resnet_cifar")},
  }, ", or a \"layers\" list");
  return r;
}
}  // namespace

std::vector<std::string> model_names() { return registry().names(); }

std::shared_ptr<Module> build_model(const json& j, const std::string& path) {
  KILN_CHECK(j.is_object(), "config: ", path, " must be an object like {\"name\": \"resnet50\"}, not ",
             json_type_name(j));
  if (j.contains("layers")) {
    JsonReader r(j, path);
    const json& layers = r.require("layers");
    std::string checkpoint = r.get("checkpoint", "none");
    r.finish();
    return std::make_shared<LayerListModel>(layers, r.path_of("layers"), checkpoint);
  }
  return registry().lookup(j, path, "name")(j, path);
}

LayerListModel::LayerListModel(const json& layers, const std::string& path, const std::string& checkpoint)
    : Sequential("custom") {
  std::string cp_path = path.substr(0, path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1) + "checkpoint";
  policy_ = RecomputePolicy::parse(checkpoint, cp_path);
  KILN_CHECK(layers.is_array() && !layers.empty(), "config: ", path, " must be a non-empty array of layers");
  for (size_t i = 0; i < layers.size(); ++i) push_back(build_layer(layers[i], path + "[" + std::to_string(i) + "]"));
  units_ = split_units(this->layers());
}

Tensor LayerListModel::forward(const Tensor& x) { return run_units(units_, x, policy_); }

json LayerListModel::to_json() const {
  json j = Sequential::to_json();
  j.erase("type");
  j["checkpoint"] = policy_.str();
  return j;
}

}  // namespace kiln::models
