// The model registry: builds a model from its JSON config (core/registry.h). kiln's models are one line
// each in registry.cpp; a program adds its own with register_model() (or KILN_REGISTER), and `kiln train`,
// eval, predict, export, AutoBatch and `--help` then take it by name like kiln's own (docs/library.md).
//   {"name": "resnet50", "num_classes": 1000}
//   {"name": "lenet"}                                   (the default model: Fashion-MNIST)
//   {"layers": [{"type": "conv2d", ...}, ...], "checkpoint": "none"}   (a custom network)
// A custom network is a torch.nn.Sequential-like list (parameter names "0.weight", ...); its
// checkpoint units end after each pooling layer, residual block or nested sequential.
// Tests: tests/models/models_test.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/registry.h"
#include "layers/recompute.h"
#include "layers/sequential.h"

namespace kiln::models {

// Builds a model from its config object ({"name": ..., options}); `path` names it in errors ("model").
// Read the options with JsonReader (core/json_reader.h) and finish() it, so that a misspelt key is
// refused naming its path. The model's to_json() must give back options that rebuild it (a run's
// config.json holds them: resume, predict and export rebuild the model from there).
using ModelFactory = std::function<std::shared_ptr<Module>(const json& options, const std::string& path)>;
struct ModelMaker {
  ModelFactory build;
  // The options read and written back without building the network (the config schema, `kiln config
  // show`); empty: build() and to_json().
  std::function<json(const json& options, const std::string& path)> read_options;
};
// The registry itself (kiln's models first).
Registry<ModelMaker>& model_registry();
// Adds a model; throws if `name` is taken (naming both places). `docs`: what `--help` says of it.
void register_model(const std::string& name, ModelFactory make, ComponentDocs docs = {},
                    const SourcePlace& where = SourcePlace::current());

// `path` names the config in messages ("model").
std::shared_ptr<Module> build_model(const json& j, const std::string& path = "model");
// The options of a registered model's config {"name": ...}, read and written back with every default
// (ModelMaker::read_options); errors as build_model's.
json read_model_options(const json& j, const std::string& path = "model");
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
