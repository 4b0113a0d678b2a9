// The model registry: builds a model from its JSON config, one line per name in registry.cpp.
//   {"name": "resnet50", "num_classes": 1000}
//   {"name": "lenet"}                                   (the default model: Fashion-MNIST)
//   {"layers": [{"type": "conv2d", ...}, ...], "checkpoint": "none"}   (a custom network)
// A custom network is a torch.nn.Sequential-like list (parameter names "0.weight", ...); its
// checkpoint units end after each pooling layer, residual block or nested sequential.
// Tests: tests/models/models_test.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/recompute.h"
#include "layers/sequential.h"

namespace kiln::models {

// `path` names the config in messages ("model").
std::shared_ptr<Module> build_model(const json& j, const std::string& path = "model");
// Registered model names, in registry order.
std::vector<std::string> model_names();

// The model built from {"layers": [...]}.
class LayerListModel : public Sequential {
 public:
  LayerListModel(const json& layers, const std::string& path, const std::string& checkpoint);
  Tensor forward(const Tensor& x) override;
  json to_json() const override;  // {"layers": [...], "checkpoint": ...}

 private:
  RecomputePolicy policy_;
  std::vector<Unit> units_;
};

}  // namespace kiln::models
