#include "layers/sequential.h"

#include "layers/norm.h"

namespace kiln {

std::shared_ptr<Module> Sequential::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
  return layers_.back();
}

Tensor run_layers(const std::vector<std::shared_ptr<Module>>& layers, const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    auto* bn = dynamic_cast<BatchNorm2d*>(layers[i].get());
    if (bn && i + 1 < layers.size() && layers[i + 1]->type() == "relu") {
      h = bn->forward_relu(h);
      ++i;  // the ReLU ran inside
    } else {
      h = layers[i]->forward(h);
    }
  }
  return h;
}

Tensor Sequential::forward(const Tensor& x) { return run_layers(layers_, x); }

json Sequential::to_json() const {
  json layers = json::array();
  for (auto& m : layers_) layers.push_back(m->to_json());
  return {{"type", "sequential"}, {"layers", layers}};
}

}  // namespace kiln
