#include "tools/checkpoint.h"

#include <filesystem>

#include "core/io/safetensors.h"
#include "layers/interop.h"

namespace fs = std::filesystem;

namespace kiln {

void save_checkpoint(const std::string& base, Module& model, const TrainingState& s) {
  json meta = {{"epoch", s.epoch},       {"step", s.step},           {"rng_seed", s.rng.seed},
               {"rng_offset", s.rng.offset}, {"best_top1", s.best_top1}, {"scaler", s.scaler},
               {"optimizer_type", s.optimizer.type}, {"optimizer_scalars", s.optimizer.scalars},
               {"config", s.config}};
  save_safetensors(base + ".state.safetensors", s.optimizer.tensors,
                   {{"kiln_training_state", meta.dump()}, {"step", std::to_string(s.step)}});
  save_safetensors(base + ".safetensors", export_pytorch_state_dict(model),
                   {{"format", "pt"}, {"step", std::to_string(s.step)}, {"kiln_model", s.config.value("model", json()).dump()}});
}

std::string resolve_checkpoint(const std::string& path) {
  std::string p = path;
  if (fs::is_directory(p)) p = (fs::path(p) / "last").string();
  const std::string ext = ".safetensors";
  if (p.size() > ext.size() && p.compare(p.size() - ext.size(), ext.size(), ext) == 0) p = p.substr(0, p.size() - ext.size());
  const std::string sext = ".state";
  if (p.size() > sext.size() && p.compare(p.size() - sext.size(), sext.size(), sext) == 0) p = p.substr(0, p.size() - sext.size());
  KILN_CHECK(fs::exists(p + ".safetensors"), "checkpoint '", path, "': ", p, ".safetensors does not exist; "
             "accepted: a run folder (runs/<name>), runs/<name>/last or runs/<name>/best");
  return p;
}

void load_weights(const std::string& path, Module& model) {
  std::string file = path;
  if (!fs::is_regular_file(file)) file = resolve_checkpoint(path) + ".safetensors";
  SafetensorsContents c = load_safetensors(file);
  try {
    import_pytorch_state_dict(model, c.tensors, /*strict=*/true);
  } catch (const Error& e) {
    KILN_FAIL("weights '", file, "' do not fit the model: ", e.what());
  }
}

TrainingState load_checkpoint(const std::string& base, Module& model) {
  SafetensorsContents st = load_safetensors(base + ".state.safetensors");
  auto it = st.metadata.find("kiln_training_state");
  KILN_CHECK(it != st.metadata.end(), "checkpoint '", base, ".state.safetensors' has no training state (metadata key "
             "kiln_training_state); is it a kiln checkpoint?");
  json meta;
  try {
    meta = json::parse(it->second);
  } catch (const json::parse_error& e) {
    KILN_FAIL("checkpoint '", base, ".state.safetensors': the training state is not valid JSON: ", e.what());
  }
  SafetensorsContents w = load_safetensors(base + ".safetensors");
  KILN_CHECK(w.metadata.count("step") && w.metadata.at("step") == st.metadata.at("step"), "checkpoint '", base,
             "': the weights (step ", w.metadata.count("step") ? w.metadata.at("step") : "?", ") and the training state (step ",
             st.metadata.at("step"), ") are from different steps; was a save interrupted?");
  try {
    import_pytorch_state_dict(model, w.tensors, /*strict=*/true);
  } catch (const Error& e) {
    KILN_FAIL("checkpoint '", base, ".safetensors' does not fit the model: ", e.what());
  }
  TrainingState s;
  try {
    s.epoch = meta.at("epoch").get<int64_t>();
    s.step = meta.at("step").get<int64_t>();
    s.rng.seed = meta.at("rng_seed").get<uint64_t>();
    s.rng.offset = meta.at("rng_offset").get<uint64_t>();
    s.best_top1 = meta.at("best_top1").get<double>();
    s.scaler = meta.at("scaler").get<std::map<std::string, double>>();
    s.optimizer.type = meta.at("optimizer_type").get<std::string>();
    s.optimizer.scalars = meta.at("optimizer_scalars").get<std::map<std::string, double>>();
    s.config = meta.at("config");
  } catch (const json::exception& e) {
    KILN_FAIL("checkpoint '", base, ".state.safetensors': the training state is incomplete: ", e.what());
  }
  s.optimizer.tensors = std::move(st.tensors);
  return s;
}

}  // namespace kiln
