// Sequential: children named "0", "1", ... run in order, as torch.nn.Sequential (so parameter
// names are "0.weight", "features.3.bias", ...). Children do not know their neighbours: each takes
// what the one before gives (a Flatten gives PyTorch's (c, h, w) order, layers/linear.h).
// Tests: tests/layers/module_test.cpp.
#pragma once
#include <memory>
#include <vector>

#include "layers/module.h"

namespace kiln {

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
