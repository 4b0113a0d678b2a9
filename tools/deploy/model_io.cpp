#include "tools/deploy/model_io.h"

#include <filesystem>
#include <optional>

#include "core/rng.h"
#include "data/config.h"
#include "layers/init.h"
#include "models/registry.h"
#include "tools/deploy/checkpoint.h"
#include "tools/deploy/model_check.h"

namespace fs = std::filesystem;

namespace kiln {

bool is_run_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

RunOrConfig resolve_run_or_config(const std::string& command, const std::string& arg) {
  std::error_code ec;
  RunOrConfig r;
  if (!fs::is_directory(arg, ec)) {
    r.config_file = arg;  // load_config_file names a missing or unreadable file
    return r;
  }
  KILN_CHECK(is_run_folder(arg), command, ": '", arg, "' is a folder without config.json, not a run folder; accepted: ",
             "a run folder (runs/<name>) or a config file");
  r.run_dir = arg;
  r.config_file = (fs::path(arg) / "config.json").string();
  return r;
}

namespace {
std::shared_ptr<Module> build_checked(const json& config, bool skip_init) {
  KILN_CHECK(config.is_object() && config.contains("model") && config.contains("data"),
             "load_model: the config needs a \"model\" and a \"data\" section (a run's config.json has both)");
  std::shared_ptr<Module> model;
  {
    std::optional<init::SkipInitGuard> skip;  // weights to load: drawing the initial ones is wasted
    if (skip_init) skip.emplace();
    model = models::build_model(config["model"], "model");
  }
  const DataConfig data = DataConfig::from_json(config["data"], "data");
  const ImageShape shape = data.val_transforms.output_shape(data.source_image_shape());
  // Images of varying size (a folder without a fixed-size transform) give no shape to check with.
  if (shape.known()) check_model_fits_data(*model, "model", shape, /*num_classes=*/0, data.source);
  return model;
}
}  // namespace

std::shared_ptr<Module> load_model(const json& config, const std::string& weights) {
  std::shared_ptr<Module> model = build_checked(config, /*skip_init=*/true);
  load_weights(weights, *model);
  model->eval();
  return model;
}

std::shared_ptr<Module> initial_model(const json& config) {
  int64_t seed = 0;
  if (config.is_object() && config.contains("train") && config["train"].is_object() && config["train"].contains("seed")) {
    const json& s = config["train"]["seed"];
    KILN_CHECK(s.is_number_integer(), "train.seed: expected an integer, got ", s.dump());
    seed = s.get<int64_t>();
  }
  manual_seed(static_cast<uint64_t>(seed));
  std::shared_ptr<Module> model = build_checked(config, /*skip_init=*/false);
  model->eval();
  return model;
}

}  // namespace kiln
