#include "layers/sequential.h"

namespace kiln {

std::shared_ptr<Module> Sequential::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
  return layers_.back();
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : layers_) h = m->forward(h);
  return h;
}

json Sequential::to_json() const {
  json layers = json::array();
  for (auto& m : layers_) layers.push_back(m->to_json());
  return {{"type", "sequential"}, {"layers", layers}};
}

}  // namespace kiln
