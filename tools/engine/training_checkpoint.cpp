// The training checkpoint's state: the metadata of a pair's state file built from a TrainingState and
// read back into one, every field checked (tools/engine/training_checkpoint.h); the pair's files are
// written and their weights read by tools/deploy/checkpoint.h.
#include "tools/engine/training_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "core/io/safetensors.h"
#include "core/json_reader.h"
#include "core/version.h"
#include "data/config.h"
#include "optim/loss_scaler.h"
#include "tools/engine/checkpoint_legacy.h"
#include "tools/engine/train_options.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

// A finite number from a string -> number map of the state, naming the field.
void check_finite_map(const std::map<std::string, double>& m, const std::string& file, const std::string& field) {
  for (const auto& [k, v] : m)
    KILN_CHECK(std::isfinite(v), "checkpoint '", file, "': training state field ", field, ".", k, " = ", v,
               " is not finite");
}

// A string -> number map from the state JSON (json_read has no overload for maps).
std::map<std::string, double> read_number_map(const json& j, const std::string& path) {
  KILN_CHECK(j.is_object(), path, ": expected an object of numbers, got ", json_type_name(j), " ", j.dump());
  std::map<std::string, double> out;
  for (auto it = j.begin(); it != j.end(); ++it) json_read(it.value(), json_path(path, it.key()), out[it.key()]);
  return out;
}

// A MetricRecord from the state JSON: {"metric", "value", "epoch"}; the metric one of
// validation_metrics() or "" (none yet), the value finite, the epoch >= 0.
MetricRecord read_metric_record(const json& j, const std::string& path) {
  MetricRecord m;
  JsonReader r(j, path);
  r.require("metric", m.metric);
  r.require("value", m.best);
  r.require("epoch", m.epoch);
  r.finish();
  const std::vector<std::string>& ok = validation_metrics();
  KILN_CHECK(m.metric.empty() || std::find(ok.begin(), ok.end(), m.metric) != ok.end(), path, ".metric = \"", m.metric,
             "\" is not accepted; accepted: \"\" (none yet), top1, top5, loss, ema_top1, ema_top5, ema_loss");
  KILN_CHECK(std::isfinite(m.best), path, ".value = ", m.best, " is not finite");
  KILN_CHECK(m.epoch >= 0, path, ".epoch = ", m.epoch, " is out of range; accepted: >= 0");
  return m;
}

json metric_record_json(const MetricRecord& m) { return json{{"metric", m.metric}, {"value", m.best}, {"epoch", m.epoch}}; }

// The records of train.best_metric and train.early_stopping ("best", "early_stopping", "stopped_early"),
// absent in checkpoints of earlier kiln: their best is `best_top1` (-1: none), by the live weights'
// top-1 or, with the config's train.ema.best_by = "ema", the EMA's.
void read_metric_records(JsonReader& r, TrainingState& s, double best_top1) {
  if (const json* v = r.find("best")) {
    s.best = read_metric_record(*v, r.path_of("best"));
  } else if (best_top1 >= 0) {
    const json ema = s.config.contains("train") && s.config["train"].is_object() ? s.config["train"].value("ema", json())
                                                                                 : json();
    const bool by_ema = ema.is_object() && ema.contains("best_by") && ema["best_by"] == "ema";
    s.best = {by_ema ? "ema_top1" : "top1", best_top1, 0};
  }
  if (const json* v = r.find("early_stopping")) s.early_stopping = read_metric_record(*v, r.path_of("early_stopping"));
  r.read("stopped_early", s.stopped_early);
}

// The training state from the metadata JSON, every field checked; errors name the file and field.
// `legacy_flatten`: the state has no "flatten_order" (written before Flatten gave (c, h, w) order,
// tools/engine/checkpoint_legacy.h).
TrainingState parse_state(const json& meta, const std::string& file, bool& legacy_flatten) {
  TrainingState s;
  double best_top1 = -1;
  try {
    KILN_CHECK(meta.is_object(), "kiln_training_state: expected an object, got ", json_type_name(meta));
    JsonReader r(meta, "kiln_training_state");
    r.require("epoch", s.epoch);
    r.require("step", s.step);
    r.require("rng_seed", s.rng.seed);
    r.require("rng_offset", s.rng.offset);
    r.require("best_top1", best_top1);
    const json* v = r.find("scaler");
    KILN_CHECK(v, "kiln_training_state.scaler is missing");
    s.scaler = read_number_map(*v, r.path_of("scaler"));
    r.require("optimizer_type", s.optimizer.type);
    v = r.find("optimizer_scalars");
    KILN_CHECK(v, "kiln_training_state.optimizer_scalars is missing");
    s.optimizer.scalars = read_number_map(*v, r.path_of("optimizer_scalars"));
    v = r.find("config");
    KILN_CHECK(v && v->is_object(), "kiln_training_state.config must be an object (the config as run), got ",
               v ? v->dump() : "nothing");
    s.config = *v;
    r.read("epoch_step", s.epoch_step);  // absent in checkpoints before mid-epoch saves: an epoch's end
    if ((v = r.find("progress"))) s.progress = read_number_map(*v, r.path_of("progress"));
    r.read("kiln_version", s.kiln_version);
    read_metric_records(r, s, best_top1);
    v = r.find("flatten_order");
    KILN_CHECK(!v || *v == kFlattenOrderChw, "kiln_training_state.flatten_order = ", v ? v->dump() : "",
               " is not accepted; accepted: \"", kFlattenOrderChw, "\" (or none: a state of an earlier kiln)");
    legacy_flatten = !v;
    r.finish();
  } catch (const Error& e) {
    KILN_FAIL("checkpoint '", file, "': the training state is not valid: ", e.what());
  }
  KILN_CHECK(s.epoch >= 0 && s.step >= 0 && s.epoch <= s.step, "checkpoint '", file,
             "': training state field epoch = ", s.epoch, " or step = ", s.step,
             " is out of range; accepted: 0 <= epoch <= step (every epoch takes at least one step)");
  KILN_CHECK(s.epoch_step >= 0 && s.epoch_step <= s.step - s.epoch, "checkpoint '", file,
             "': training state field epoch_step = ", s.epoch_step, " is out of range; accepted: 0 .. step - epoch (",
             s.step - s.epoch, ")");
  check_finite_map(s.progress, file, "progress");
  KILN_CHECK(std::isfinite(best_top1) && (best_top1 == -1 || (best_top1 >= 0 && best_top1 <= 1)),
             "checkpoint '", file, "': training state field best_top1 = ", best_top1,
             " is out of range; accepted: -1 (none yet) or an accuracy in [0, 1]");
  for (const auto& [name, m] : {std::pair<const char*, const MetricRecord&>{"best", s.best}, {"early_stopping", s.early_stopping}})
    KILN_CHECK(m.epoch <= s.epoch, "checkpoint '", file, "': training state field ", name, ".epoch = ", m.epoch,
               " is out of range; accepted: 0 .. epoch (", s.epoch, ")");
  KILN_CHECK(s.stopped_early >= 0 && s.stopped_early <= s.epoch, "checkpoint '", file,
             "': training state field stopped_early = ", s.stopped_early, " is out of range; accepted: 0 .. epoch (",
             s.epoch, ")");
  KILN_CHECK(!s.optimizer.type.empty(), "checkpoint '", file, "': training state field optimizer_type is empty");
  check_finite_map(s.optimizer.scalars, file, "optimizer_scalars");
  check_finite_map(s.scaler, file, "scaler");
  if (!s.scaler.empty()) {
    try {
      LossScaler().load_state_dict(s.scaler);
    } catch (const Error& e) {
      KILN_FAIL("checkpoint '", file, "': training state field scaler: ", e.what());
    }
  }
  return s;
}

}  // namespace

void save_checkpoint(const std::string& base, Module& model, const TrainingState& s, Module* ema, int64_t keep) {
  // best_top1: for readers of earlier kiln, the best where it is a top-1
  const double best_top1 = !s.best.metric.empty() && s.best.metric.find("top1") != std::string::npos ? s.best.best : -1;
  json meta = {{"epoch", s.epoch},       {"step", s.step},           {"rng_seed", s.rng.seed},
               {"rng_offset", s.rng.offset}, {"best_top1", best_top1}, {"scaler", s.scaler},
               {"optimizer_type", s.optimizer.type}, {"optimizer_scalars", s.optimizer.scalars},
               {"config", s.config}, {"flatten_order", kFlattenOrderChw}, {"epoch_step", s.epoch_step},
               {"progress", s.progress}, {"kiln_version", kiln_version()},
               {"best", metric_record_json(s.best)}, {"early_stopping", metric_record_json(s.early_stopping)},
               {"stopped_early", s.stopped_early}};
  write_checkpoint_pair(base, {s.step, &model, ema, s.config.value("model", json()), s.optimizer.tensors, meta}, keep);
}

TrainingState load_checkpoint(const std::string& base, Module& model, Module* ema) {
  const CheckpointFiles f = checkpoint_files(base);
  SafetensorsContents st = load_safetensors(f.state);
  auto it = st.metadata.find("kiln_training_state");
  KILN_CHECK(it != st.metadata.end(), "checkpoint '", f.state, "' has no training state (metadata key "
             "kiln_training_state); is it a kiln checkpoint?");
  json meta;
  try {
    meta = json::parse(it->second);
  } catch (const json::parse_error& e) {
    KILN_FAIL("checkpoint '", f.state, "': the training state is not valid JSON: ", e.what());
  }
  bool legacy_flatten = false;
  TrainingState s = parse_state(meta, f.state, legacy_flatten);
  const int64_t state_step = checkpoint_file_step(st, f.state);
  KILN_CHECK(state_step == s.step, "checkpoint '", f.state, "': metadata step ", state_step,
             " differs from the training state's step ", s.step);
  for (const auto& [name, t] : st.tensors)
    KILN_CHECK(t.dtype() == DType::f32, "checkpoint '", f.state, "': optimizer tensor '", name, "' is ", t.str(),
               "; optimizer state is F32");
  check_finite_tensors(st.tensors, f.state, "checkpoint");

  // The weights (and the EMA's): from the state's step, finite, fitting the model.
  load_pair_weights(base, f.weights, f.state, s.step, model, "weights");
  if (ema && fs::exists(f.ema)) {
    load_pair_weights(base, f.ema, f.state, s.step, *ema, "EMA weights");
    s.ema_loaded = true;
  }
  if (legacy_flatten) {
    // The channels of the images the run trained on, for a flatten that sees the model's input.
    int64_t image_channels = 0;
    try {
      if (s.config.contains("data")) {
        const DataConfig d = DataConfig::from_json(s.config["data"], "data");
        image_channels = d.transforms(Split::train).output_shape(d.source_image_shape()).c;
      }
    } catch (const Error&) {
      image_channels = 0;  // unknown: a flatten that needs it makes the conversion refuse
    }
    convert_legacy_optimizer_state(model, st.tensors, image_channels, f.state);
  }
  s.optimizer.tensors = std::move(st.tensors);
  return s;
}

}  // namespace kiln
