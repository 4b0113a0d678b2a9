#include "layers/sequential.h"

#include "layers/linear.h"

namespace kiln {

std::shared_ptr<Module> Sequential::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(layers_.size()), m);
  if (auto* lin = dynamic_cast<Linear*>(m.get())) {
    for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
      if (auto* flat = dynamic_cast<Flatten*>(it->get())) {
        lin->set_flattened_input(flat->flattened_shape());
        break;
      }
      if ((*it)->type() != "relu" && (*it)->type() != "dropout") break;
    }
  }
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
