#include "layers/sequential.h"

#include <algorithm>
#include <iterator>

#include "layers/blocks.h"
#include "layers/conv.h"
#include "layers/linear.h"
#include "layers/norm.h"

namespace kiln {

namespace {
// The channels that come out of `layers` (walking back over layers that keep them), 0 if unknown.
int64_t output_channels(const std::vector<std::shared_ptr<Module>>& layers) {
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    Module* m = it->get();
    if (auto* c = dynamic_cast<Conv2d*>(m)) return c->options().out_channels;
    if (auto* b = dynamic_cast<BatchNorm2d*>(m)) return b->options().num_features;
    if (auto* r = dynamic_cast<ResidualBlock*>(m)) return r->out_channels();
    static const char* keep[] = {"relu", "dropout", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "local_response_norm"};
    if (std::find(std::begin(keep), std::end(keep), m->type()) == std::end(keep)) return 0;
  }
  return 0;
}
}  // namespace

std::shared_ptr<Module> Sequential::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(layers_.size()), m);
  if (auto* flat = dynamic_cast<Flatten*>(m.get())) {
    int64_t c = output_channels(layers_);
    if (c > 0) flat->flattened_shape()->channels = c;
  }
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
