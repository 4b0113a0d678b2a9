#include "layers/registry.h"

#include <functional>

#include "layers/activation.h"
#include "layers/blocks.h"
#include "layers/conv.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/options.h"
#include "layers/pooling.h"

namespace kiln {

namespace {
// A layer without options: only "type" is accepted.
template <class M>
std::shared_ptr<Module> plain(const json& j, const std::string& path) {
  layer_reader(j, path).finish();
  return std::make_shared<M>();
}

// kiln's layers, one line each: the maker, and for the config schema the options its reader requires
// and the struct documenting them.
void add_builtin_layers(Registry<LayerFactory>& r) {
  using P = const std::string&;
  auto docs = [](json sample, std::vector<std::string> structs) {
    return ComponentDocs{"", std::move(sample), std::move(structs), {}};
  };
  const json conv = {{"in_channels", 1}, {"out_channels", 1}, {"kernel_size", 1}};

  r.add("conv2d", [](const json& j, P p) { return std::make_shared<Conv2d>(Conv2dOptions::from_json(j, p)); },
        docs(conv, {"Conv2dOptions"}));
  r.add("linear", [](const json& j, P p) { return std::make_shared<Linear>(LinearOptions::from_json(j, p)); },
        docs({{"in_features", 1}, {"out_features", 1}}, {"LinearOptions"}));
  r.add("batch_norm2d", [](const json& j, P p) { return std::make_shared<BatchNorm2d>(BatchNormOptions::from_json(j, p), "batch_norm2d"); },
        docs({{"num_features", 1}}, {"BatchNormOptions"}));
  r.add("batch_norm1d", [](const json& j, P p) { return std::make_shared<BatchNorm2d>(BatchNormOptions::from_json(j, p), "batch_norm1d"); },
        docs({{"num_features", 1}}, {"BatchNormOptions"}));
  r.add("relu", plain<ReLU>);
  r.add("silu", plain<SiLU>);
  r.add("max_pool2d", [](const json& j, P p) { return std::make_shared<MaxPool2d>(Pool2dOptions::from_json(j, p, "max_pool2d")); },
        docs({{"kernel_size", 2}}, {"Pool2dOptions"}));
  r.add("avg_pool2d", [](const json& j, P p) { return std::make_shared<AvgPool2d>(Pool2dOptions::from_json(j, p, "avg_pool2d")); },
        docs({{"kernel_size", 2}}, {"Pool2dOptions"}));
  r.add("adaptive_avg_pool2d", [](const json& j, P p) { return std::make_shared<AdaptiveAvgPool2d>(AdaptiveAvgPool2dOptions::from_json(j, p)); },
        docs(json::object(), {"AdaptiveAvgPool2dOptions"}));
  r.add("global_avg_pool", plain<GlobalAvgPool>);
  r.add("dropout", [](const json& j, P p) { return std::make_shared<Dropout>(DropoutOptions::from_json(j, p)); },
        docs(json::object(), {"DropoutOptions"}));
  r.add("local_response_norm", [](const json& j, P p) { return std::make_shared<LocalResponseNorm>(LocalResponseNormOptions::from_json(j, p)); },
        docs({{"size", 1}}, {"LocalResponseNormOptions"}));
  r.add("flatten", plain<Flatten>);
  r.add("basic_block", [](const json& j, P p) { return std::make_shared<BasicBlock>(BlockOptions::from_json(j, p, "basic_block")); },
        docs({{"in_channels", 1}, {"planes", 1}}, {"BlockOptions"}));
  r.add("bottleneck", [](const json& j, P p) { return std::make_shared<Bottleneck>(BlockOptions::from_json(j, p, "bottleneck")); },
        docs({{"in_channels", 4}, {"planes", 1}}, {"BlockOptions"}));
  r.add("sequential", [](const json& j, P p) {
         JsonReader r = layer_reader(j, p);
         auto seq = build_sequential(r.require("layers"), r.path_of("layers"));
         r.finish();
         return std::static_pointer_cast<Module>(seq);
       }, docs({{"layers", json::array({{{"type", "relu"}}})}}, {"LayerKeys"}));
}
}  // namespace

Registry<LayerFactory>& layer_registry() {
  static Registry<LayerFactory> r = [] {
    Registry<LayerFactory> built("a layer type");
    add_builtin_layers(built);
    return built;
  }();
  return r;
}

void register_layer(const std::string& type, LayerFactory make, ComponentDocs docs, const SourcePlace& where) {
  layer_registry().add(type, std::move(make), std::move(docs), where);
}

std::vector<std::string> layer_types() { return layer_registry().names(); }

std::shared_ptr<Module> build_layer(const json& j, const std::string& path) {
  KILN_CHECK(j.is_object(), "config: ", path, " must be an object like {\"type\": \"conv2d\", ...}, not ",
             json_type_name(j), " ", j.dump());
  const LayerFactory& make = layer_registry().lookup(j, path, "type");
  const std::string type = j["type"].get<std::string>();
  return call_component(path, "type", type, layer_registry().entry(type)->place,
                        [&] { return make(j, path); });
}

std::shared_ptr<Sequential> build_sequential(const json& layers, const std::string& path) {
  KILN_CHECK(layers.is_array(), "config: ", path, " must be an array of layers, not ", json_type_name(layers));
  auto seq = std::make_shared<Sequential>();
  for (size_t i = 0; i < layers.size(); ++i)
    seq->push_back(build_layer(layers[i], path + "[" + std::to_string(i) + "]"));
  return seq;
}

}  // namespace kiln
