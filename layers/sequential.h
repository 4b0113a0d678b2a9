// Sequential: children named "0", "1", ... run in order, as torch.nn.Sequential (so parameter
// names are "0.weight", "features.3.bias", ...). Children do not know their neighbours: each takes
// what the one before gives (a Flatten gives PyTorch's (c, h, w) order, layers/linear.h). The one
// exception is run_layers's: a batch norm directly followed by a ReLU runs as the fused op
// (BatchNorm2d::forward_relu), with the same values.
// Tests: tests/layers/module_test.cpp.
#pragma once
#include <memory>
#include <vector>

#include "layers/module.h"

namespace kiln {

// Runs `layers` in order on x; a BatchNorm2d followed by a ReLU layer runs as one fused call
// (BatchNorm2d::forward_relu: the same values and gradients, one pass fewer over the activations).
// Sequential::forward and the checkpointed layer lists (layers/recompute.h) run through it.
Tensor run_layers(const std::vector<std::shared_ptr<Module>>& layers, const Tensor& x);

class Sequential : public Module {
 public:
  // `type` is "sequential" for the layer; a model built from a layer list gives its own.
  explicit Sequential(std::string type = "sequential") : Module(std::move(type)) {}
  // Appends `m` as child "<size()>"; returns it.
  std::shared_ptr<Module> push_back(std::shared_ptr<Module> m);
  template <class M>
  std::shared_ptr<M> add(std::shared_ptr<M> m) {
    push_back(m);
    return m;
  }
  Tensor forward(const Tensor& x) override;
  json to_json() const override;  // {"type": "sequential", "layers": [...]}

  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return layers_.at(i); }
  const std::vector<std::shared_ptr<Module>>& layers() const { return layers_; }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace kiln
