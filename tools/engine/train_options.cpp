// TrainOptions (the config's "train" section) read from and written to JSON, and the option parsers
// declared in tools/engine/train_options.h.
#include "tools/engine/train_options.h"

#include <cmath>

#include "core/check.h"
#include "core/device.h"
#include "core/json_util.h"
#include "layers/loss.h"

namespace kiln {

namespace {
const char* kAccepted = "accepted: \"balanced\" (n_samples / (n_classes * count) per class) or a list of one number "
                        ">= 0 per class, not all 0";
}

int64_t accumulate_from_json(const json& j, const std::string& path) {
  const char* accepted = "; accepted: a positive integer N (N micro-batches per optimizer step; default 1) or \"auto\" "
                         "(AutoBatch picks the smallest N whose micro-batch fits)";
  if (j.is_null()) return 1;
  if (j.is_string()) {
    KILN_CHECK(j.get<std::string>() == "auto", "config: ", path, " = ", j.dump(), " is not accepted", accepted);
    return 0;
  }
  int64_t n = 0;
  KILN_CHECK(json_integer(j, 1, int64_t{1} << 20, n) == IntegerCheck::ok, "config: ", path, " = ", j.dump(),
             " is not accepted", accepted);
  return n;
}

json accumulate_to_json(int64_t n) { return n == 0 ? json("auto") : json(n); }

int64_t threads_from_json(const json& j, const std::string& path) {
  const char* accepted = "; accepted: a positive integer N (N OpenMP threads for the training computations) or "
                         "\"auto\" (or 0: OpenMP's default, one per core this process may use)";
  if (j.is_null()) return 0;
  json v = j;
  if (j.is_string()) {
    // A config's "auto" makes `train.threads=4` on the command line the text "4" (apply_overrides
    // keeps a string key's text): digits read as the number.
    const std::string t = j.get<std::string>();
    if (t == "auto") return 0;
    const bool digits = !t.empty() && t.size() < 10 && t.find_first_not_of("0123456789") == std::string::npos;
    KILN_CHECK(digits, "config: ", path, " = ", j.dump(), " is not accepted", accepted);
    v = std::stoll(t);
  }
  int64_t n = 0;
  KILN_CHECK(json_integer(v, 0, 4096, n) == IntegerCheck::ok, "config: ", path, " = ", j.dump(), " is not accepted",
             accepted, ", at most 4096");
  return n;
}

const std::vector<std::string>& validation_metrics() {
  static const std::vector<std::string> m{"top1", "top5", "loss", "ema_top1", "ema_top5", "ema_loss"};
  return m;
}

namespace {

bool is_ema_metric(const std::string& m) { return m.rfind("ema_", 0) == 0; }

// An ema_* figure named at `path` needs train.ema.
void check_ema_metric(const std::string& metric, const std::string& path, bool ema) {
  KILN_CHECK(ema || !is_ema_metric(metric), "config: ", path, " = \"", metric, "\" is a figure of the EMA weights, and "
             "train.ema is off; accepted without train.ema: top1, top5, loss (or turn train.ema on: train.ema=true)");
}

// train.best_metric: given, or train.ema.best_by's older form ("ema": "ema_top1"); the two must agree.
std::string best_metric_from(JsonReader& r, const EmaOptions& ema) {
  const bool by_ema = ema.enabled && ema.best_by == "ema";
  const std::string m = r.get_choice("best_metric", by_ema ? "ema_top1" : "top1", validation_metrics());
  check_ema_metric(m, r.path_of("best_metric"), ema.enabled);
  KILN_CHECK(!by_ema || is_ema_metric(m), "config: ", r.path_of("best_metric"), " = \"", m, "\" (the live weights' "
             "figure) contradicts train.ema.best_by = \"ema\"; accepted: train.best_metric = \"ema_", m,
             "\" (train.ema.best_by is its older form: drop it), or train.ema.best_by = \"live\"");
  return m;
}

}  // namespace

EarlyStoppingOptions EarlyStoppingOptions::from_json(const json& j, const std::string& path, bool ema) {
  const char* accepted = "; accepted: null (off) or an object {\"metric\": \"top1\"|\"top5\"|\"loss\" (\"ema_top1\"|"
                         "\"ema_top5\"|\"ema_loss\" with train.ema), \"patience\": epochs >= 1, \"min_delta\": a number >= 0}";
  EarlyStoppingOptions o;
  if (j.is_null() || (j.is_boolean() && !j.get<bool>())) return o;
  KILN_CHECK(j.is_object(), "config: ", path, " = ", j.dump(), " is not accepted", accepted);
  JsonReader r(j, path);
  r.require("metric", o.metric);  // then checked against the choices
  o.metric = r.get_choice("metric", o.metric, validation_metrics());
  check_ema_metric(o.metric, r.path_of("metric"), ema);
  r.require("patience", o.patience);
  o.patience = r.get("patience", o.patience, int64_t{1}, int64_t{100000});
  o.min_delta = r.get("min_delta", o.min_delta, 0.0, 1e9);
  KILN_CHECK(o.metric.find("loss") != std::string::npos || o.min_delta < 1, "config: ", r.path_of("min_delta"), " = ",
             o.min_delta, " is not accepted for ", r.path_of("metric"), " = \"", o.metric, "\": a top-1 or top-5 is a "
             "fraction in [0, 1], so no improvement would exceed it; accepted: a number in [0, 1), e.g. 0.001 (0.1 "
             "percentage point)");
  r.finish();
  return o;
}

json EarlyStoppingOptions::to_json() const {
  if (!enabled()) return nullptr;
  return json{{"metric", metric}, {"patience", patience}, {"min_delta", min_delta}};
}

void check_class_weights_option(const json& option, const std::string& path) {
  if (option.is_null()) return;
  if (option.is_string()) {
    KILN_CHECK(option.get<std::string>() == "balanced", path, " = ", option.dump(), " is not accepted; ", kAccepted);
    return;
  }
  KILN_CHECK(option.is_array() && !option.empty(), path, " = ", option.dump(), " is not accepted; ", kAccepted);
  bool any = false;
  for (size_t i = 0; i < option.size(); ++i) {
    const json& v = option[i];
    KILN_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0, path, "[", i, "] = ", v.dump(),
               " is not accepted; each weight must be a finite number >= 0 (", kAccepted, ")");
    any = any || v.get<double>() > 0;
  }
  KILN_CHECK(any, path, ": every weight is 0, so no sample would count; ", kAccepted);
}

std::vector<std::string> freeze_list_from_json(const json& j, const std::string& path) {
  // train.freeze also takes "backbone" (tools/engine/finetune.h: everything but the classifier head).
  const bool freeze = path.size() >= 6 && path.compare(path.size() - 6, 6, "freeze") == 0;
  const std::string accepted = std::string("; accepted: a list of parameter-name prefixes, e.g. [\"conv1\", \"bn1\", "
                                           "\"layer1\"]") + (freeze ? ", or [\"backbone\"]: all but the classifier head" : "");
  KILN_CHECK(j.is_array(), "config: ", path, " = ", j.dump(), " is not accepted", accepted);
  std::vector<std::string> out;
  for (size_t i = 0; i < j.size(); ++i) {
    KILN_CHECK(j[i].is_string() && !j[i].get<std::string>().empty(), "config: ", path, "[", i, "] = ", j[i].dump(),
               " is not accepted", accepted);
    out.push_back(j[i].get<std::string>());
  }
  return out;
}


TrainOptions TrainOptions::from_json(const json& j, const std::string& path) {
  TrainOptions o;
  JsonReader r(j, path);
  // A key read raw takes more than one kind of value: its listing (`kiln config keys`) is noted before its read.
  auto describe = [&r](const char* key, const char* type, json def, const char* accepted = "") {
    if (KeyRecorder* rec = KeyRecorder::current())
      rec->note({r.path_of(key), type, std::move(def), true, false, accepted});
  };
  o.epochs = r.get("epochs", o.epochs, int64_t{1}, int64_t{100000});
  o.time_budget_minutes = r.get("time_budget_minutes", o.time_budget_minutes, 0.0, 1e7);
  describe("device", "string or integer or list", o.device);
  o.device = device_option_from_json(r.raw("device"), r.path_of("device"), o.device);  // also 0 and [0, 1]
  o.cudnn_benchmark = r.get("cudnn_benchmark", o.cudnn_benchmark);
  o.cuda_graph = r.get_choice("cuda_graph", o.cuda_graph, {"auto", "on", "off"});
  o.precision = r.get_choice("precision", o.precision, precision_names());  // tools/deploy/precision.h
  o.seed = r.get("seed", o.seed, int64_t{0}, INT64_MAX);
  describe("loss", "string or object", "cross_entropy");
  if (const json* loss = r.find("loss")) {
    o.loss = loss_options(*loss, r.path_of("loss"));
    KeyRecorder quiet;  // its own keys are the loss section's (the config schema lists them there)
    make_loss(o.loss, LossContext{}, r.path_of("loss"));  // a bad name or option is refused here, naming it
  }
  o.label_smoothing = r.get("label_smoothing", o.label_smoothing, 0.0, 0.999);
  describe("class_weights", "\"balanced\" or list of numbers", nullptr);
  o.class_weights = r.raw("class_weights");  // null when absent
  check_class_weights_option(o.class_weights, r.path_of("class_weights"));
  o.clip_grad_norm = r.get("clip_grad_norm", o.clip_grad_norm, 0.0, 1e9);
  o.checkpoint = r.get("checkpoint", o.checkpoint);
  o.resume = r.get("resume", o.resume);
  o.init = r.get("init", o.init);
  describe("freeze", "list of strings", o.freeze);
  if (r.has("freeze")) o.freeze = freeze_list_from_json(r.raw("freeze"), r.path_of("freeze"));
  else r.allow("freeze");
  describe("init_fresh", "list of strings", o.init_fresh);
  if (r.has("init_fresh")) o.init_fresh = freeze_list_from_json(r.raw("init_fresh"), r.path_of("init_fresh"));
  else r.allow("init_fresh");
  o.runs_dir = r.get("runs_dir", o.runs_dir);
  o.log_every = r.get("log_every", o.log_every, int64_t{0}, INT64_MAX);
  o.max_steps_per_epoch = r.get("max_steps_per_epoch", o.max_steps_per_epoch, int64_t{0}, INT64_MAX);
  o.stop_after = r.get("stop_after", o.stop_after, int64_t{0}, int64_t{100000});
  o.eval_every = r.get("eval_every", o.eval_every, int64_t{1}, int64_t{100000});
  o.save_every_steps = r.get("save_every_steps", o.save_every_steps, int64_t{0}, INT64_MAX);
  o.save_every_minutes = r.get("save_every_minutes", o.save_every_minutes, 0.0, 1e7);
  o.keep_last = r.get("keep_last", o.keep_last, int64_t{1}, int64_t{1000});
  o.plots = r.get("plots", o.plots);
  o.tensorboard = r.get("tensorboard", o.tensorboard);
  o.reuse_first_batch = r.get("reuse_first_batch", o.reuse_first_batch);
  o.comm_timeout_s = r.get("comm_timeout_s", o.comm_timeout_s, 0.1, 1e6);
  o.autobatch_fraction = r.get("autobatch_fraction", o.autobatch_fraction, 0.01, 1.0);
  if (r.has("loss_scaler")) o.loss_scaler = LossScalerOptions::from_json(r.raw("loss_scaler"), r.path_of("loss_scaler"));
  else r.allow("loss_scaler");
  describe("ema", "boolean or object", o.ema.to_json());
  o.ema = EmaOptions::from_json(r.raw("ema"), r.path_of("ema"));
  describe("accumulate", "integer or \"auto\"", accumulate_to_json(o.accumulate), "1..1048576");
  o.accumulate = accumulate_from_json(r.raw("accumulate"), r.path_of("accumulate"));
  if (r.has("mixup")) o.mixup = MixupOptions::from_json(r.raw("mixup"), r.path_of("mixup"));  // data/mix.h
  else r.allow("mixup");
  o.tta = r.get_choice("tta", o.tta, {"none", "flip"});  // tools/deploy/tta.h
  o.best_metric = best_metric_from(r, o.ema);  // tools/engine/metric_watch.h
  o.early_stopping = EarlyStoppingOptions::from_json(r.raw("early_stopping"), r.path_of("early_stopping"), o.ema.enabled);
  describe("threads", "integer or \"auto\"", json("auto"), "0..4096");
  o.threads = threads_from_json(r.raw("threads"), r.path_of("threads"));
  r.finish();
  return o;
}

json TrainOptions::to_json() const {
  return json{{"epochs", epochs},
              {"time_budget_minutes", time_budget_minutes},
              {"device", device},
              {"cudnn_benchmark", cudnn_benchmark},
              {"cuda_graph", cuda_graph},
              {"precision", precision},
              {"seed", seed},
              {"loss", loss},
              {"label_smoothing", label_smoothing},
              {"class_weights", class_weights},
              {"clip_grad_norm", clip_grad_norm},
              {"checkpoint", checkpoint},
              {"resume", resume},
              {"init", init},
              {"freeze", freeze},
              {"init_fresh", init_fresh},
              {"runs_dir", runs_dir},
              {"log_every", log_every},
              {"max_steps_per_epoch", max_steps_per_epoch},
              {"stop_after", stop_after},
              {"eval_every", eval_every},
              {"save_every_steps", save_every_steps},
              {"save_every_minutes", save_every_minutes},
              {"keep_last", keep_last},
              {"plots", plots},
              {"tensorboard", tensorboard},
              {"reuse_first_batch", reuse_first_batch},
              {"comm_timeout_s", comm_timeout_s},
              {"autobatch_fraction", autobatch_fraction},
              {"loss_scaler", loss_scaler.to_json()},
              {"ema", ema.to_json()},
              {"accumulate", accumulate_to_json(accumulate)},
              {"mixup", mixup.to_json()},
              {"tta", tta},
              {"best_metric", best_metric},
              {"early_stopping", early_stopping.to_json()},
              {"threads", threads}};
}

}  // namespace kiln
