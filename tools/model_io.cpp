#include "tools/model_io.h"

#include "data/config.h"
#include "models/registry.h"
#include "tools/checkpoint.h"
#include "tools/model_check.h"

namespace kiln {

std::shared_ptr<Module> load_model(const json& config, const std::string& weights) {
  KILN_CHECK(config.is_object() && config.contains("model") && config.contains("data"),
             "load_model: the config needs a \"model\" and a \"data\" section (a run's config.json has both)");
  std::shared_ptr<Module> model = models::build_model(config["model"], "model");
  const DataConfig data = DataConfig::from_json(config["data"], "data");
  const ImageShape shape = data.val_transforms.output_shape(data.source_image_shape());
  // Images of varying size (a folder without a fixed-size transform) give no shape to check with; the
  // weights then load as far as the model knows its shapes (a flatten's input is found by a forward).
  if (shape.known()) check_model_fits_data(*model, "model", shape, /*num_classes=*/0, data.source);
  load_weights(weights, *model);
  model->eval();
  return model;
}

}  // namespace kiln
