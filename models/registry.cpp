#include "models/registry.h"

#include <functional>

#include "layers/registry.h"
#include "models/alexnet.h"
#include "models/lenet.h"
#include "models/resnet.h"
#include "models/vgg.h"

namespace kiln::models {

namespace {
template <class Model, class Options>
ModelMaker maker(const std::string& name) {
  return {[name](const json& j, const std::string& p) { return std::make_shared<Model>(Options::from_json(j, p, name)); },
          [name](const json& j, const std::string& p) { return Options::from_json(j, p, name).to_json(); }};
}

// kiln's models, one line each: the maker, its options reader (the schema reads the options without
// building the network: resnet152's weights are 230 MB), and the structs documenting its keys.
void add_builtin_models(Registry<ModelMaker>& r) {
  const auto docs = [](const char* options) { return ComponentDocs{"", json::object(), {options, "CommonOptions", "ModelKeys"}, {}}; };
  r.add("lenet", {[](const json& j, const std::string& p) { return std::make_shared<LeNet>(LeNetOptions::from_json(j, p)); },
                  [](const json& j, const std::string& p) { return LeNetOptions::from_json(j, p).to_json(); }},
        docs("LeNetOptions"));
  r.add("alexnet", {[](const json& j, const std::string& p) { return std::make_shared<AlexNet>(AlexNetOptions::from_json(j, p)); },
                    [](const json& j, const std::string& p) { return AlexNetOptions::from_json(j, p).to_json(); }},
        docs("AlexNetOptions"));
  for (const char* v : {"vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn"})
    r.add(v, maker<VGG, VGGOptions>(v), docs("VGGOptions"));
  for (const char* v : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet20", "resnet32", "resnet44",
                        "resnet56", "resnet110", "resnet_cifar"})
    r.add(v, maker<ResNet, ResNetOptions>(v), docs("ResNetOptions"));
}
}  // namespace

Registry<ModelMaker>& model_registry() {
  static Registry<ModelMaker> r = [] {
    Registry<ModelMaker> built("a model", ", or a \"layers\" list");
    add_builtin_models(built);
    return built;
  }();
  return r;
}

void register_model(const std::string& name, ModelFactory make, ComponentDocs docs, const SourcePlace& where) {
  model_registry().add(name, {std::move(make), nullptr}, std::move(docs), where);
}

std::vector<std::string> model_names() { return model_registry().names(); }

json read_model_options(const json& j, const std::string& path) {
  const ModelMaker& m = model_registry().lookup(j, path, "name");
  const std::string name = j["name"].get<std::string>();
  return call_component(path, "name", name, model_registry().entry(name)->place, [&] {
    return m.read_options ? m.read_options(j, path) : m.build(j, path)->to_json();
  });
}

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
  const ModelMaker& m = model_registry().lookup(j, path, "name");
  const std::string name = j["name"].get<std::string>();
  return call_component(path, "name", name, model_registry().entry(name)->place, [&] { return m.build(j, path); });
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
