#include "layers/registry.h"

#include <functional>

#include "core/registry.h"

#include "layers/activation.h"
#include "layers/blocks.h"
#include "layers/conv.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/options.h"
#include "layers/pooling.h"

namespace kiln {

namespace {
using LayerFactory = std::function<std::shared_ptr<Module>(const json&, const std::string&)>;

// A layer without options: only "type" is accepted.
template <class M>
std::shared_ptr<Module> plain(const json& j, const std::string& path) {
  layer_reader(j, path).finish();
  return std::make_shared<M>();
}

const Registry<LayerFactory>& registry() {
  using P = const std::string&;
  static const Registry<LayerFactory> r("a layer type", {
      {"conv2d", [](const json& j, P p) { return std::make_shared<Conv2d>(Conv2dOptions::from_json(j, p)); }},
      {"linear", [](const json& j, P p) { return std::make_shared<Linear>(LinearOptions::from_json(j, p)); }},
      {"batch_norm2d", [](const json& j, P p) { return std::make_shared<BatchNorm2d>(BatchNormOptions::from_json(j, p), "batch_norm2d"); }},
      {"batch_norm1d", [](const json& j, P p) { return std::make_shared<BatchNorm2d>(BatchNormOptions::from_json(j, p), "batch_norm1d"); }},
      {"relu", plain<ReLU>},
      {"silu", plain<SiLU>},
      {"max_pool2d", [](const json& j, P p) { return std::make_shared<MaxPool2d>(Pool2dOptions::from_json(j, p, "max_pool2d")); }},
      {"avg_pool2d", [](const json& j, P p) { return std::make_shared<AvgPool2d>(Pool2dOptions::from_json(j, p, "avg_pool2d")); }},
      {"adaptive_avg_pool2d", [](const json& j, P p) { return std::make_shared<AdaptiveAvgPool2d>(AdaptiveAvgPool2dOptions::from_json(j, p)); }},
      {"global_avg_pool", plain<GlobalAvgPool>},
      {"dropout", [](const json& j, P p) { return std::make_shared<Dropout>(DropoutOptions::from_json(j, p)); }},
      {"local_response_norm", [](const json& j, P p) { return std::make_shared<LocalResponseNorm>(LocalResponseNormOptions::from_json(j, p)); }},
      {"flatten", plain<Flatten>},
      {"basic_block", [](const json& j, P p) { return std::make_shared<BasicBlock>(BlockOptions::from_json(j, p, "basic_block")); }},
      {"bottleneck", [](const json& j, P p) { return std::make_shared<Bottleneck>(BlockOptions::from_json(j, p, "bottleneck")); }},
      {"sequential", [](const json& j, P p) {
         JsonReader r = layer_reader(j, p);
         auto seq = build_sequential(r.require("layers"), r.path_of("layers"));
         r.finish();
         return std::static_pointer_cast<Module>(seq);
       }},
  });
  return r;
}
}  // namespace

std::vector<std::string> layer_types() { return registry().names(); }

std::shared_ptr<Module> build_layer(const json& j, const std::string& path) {
  KILN_CHECK(j.is_object(), "config: ", path, " must be an object like {\"type\": \"conv2d\", ...}, not ",
             json_type_name(j), " ", j.dump());
  return registry().lookup(j, path, "type")(j, path);
}

std::shared_ptr<Sequential> build_sequential(const json& layers, const std::string& path) {
  KILN_CHECK(layers.is_array(), "config: ", path, " must be an array of layers, not ", json_type_name(layers));
  auto seq = std::make_shared<Sequential>();
  for (size_t i = 0; i < layers.size(); ++i)
    seq->push_back(build_layer(layers[i], path + "[" + std::to_string(i) + "]"));
  return seq;
}

}  // namespace kiln
