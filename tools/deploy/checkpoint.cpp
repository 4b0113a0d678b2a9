// Checkpoint save (a folder per pair, one symlink switch) and load (every field and tensor checked).
// Layout and guarantees: tools/deploy/checkpoint.h.
#include "tools/deploy/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/io/safetensors.h"
#include "core/json_reader.h"
#include "core/ops/elementwise.h"
#include "data/config.h"
#include "layers/interop.h"
#include "optim/loss_scaler.h"
#include "core/version.h"
#include "tools/deploy/checkpoint_legacy.h"
#include "tools/deploy/train_options.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

const std::string kExt = ".safetensors";
const std::string kStateExt = ".state.safetensors";
const std::string kEmaExt = ".ema.safetensors";
const std::string kTmpFolder = "ckpt.tmp-";

std::string errno_str() { return std::strerror(errno); }

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}
bool starts_with(const std::string& s, const std::string& start) { return s.rfind(start, 0) == 0; }

// fsync of a folder makes the renames and links in it durable (best effort: some filesystems
// refuse fsync on a directory).
void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// `<name>-<step>` or `<name>-<step>.<k>`: a pair folder of checkpoint `name`.
bool is_pair_folder_name(const std::string& fn, const std::string& name) {
  if (!starts_with(fn, name + "-") || fn.size() == name.size() + 1) return false;
  for (size_t i = name.size() + 1; i < fn.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(fn[i])) && fn[i] != '.') return false;
  return std::isdigit(static_cast<unsigned char>(fn[name.size() + 1]));
}

// The folder the symlink `link` names ("" when it is not a symlink).
std::string link_target(const fs::path& link) {
  std::error_code ec;
  if (!fs::is_symlink(link, ec)) return "";
  return fs::read_symlink(link, ec).string();
}

// The step of a pair folder name `<name>-<step>[.<k>]` (-1 when it does not parse).
int64_t pair_folder_step(const std::string& fn, const std::string& name) {
  try {
    return std::stoll(fn.substr(name.size() + 1));
  } catch (const std::exception&) {
    return -1;
  }
}

// Removes what killed saves of checkpoint `name` left in `dir` (temporary folders and links) and
// its pair folders other than the one `dir/name` names and the keep - 1 newest others (by step).
void remove_stale(const fs::path& dir, const std::string& name, int64_t keep = 1) {
  const std::string current = link_target(dir / name);
  std::error_code ec;
  std::vector<fs::path> stale;  // collected first: no removal while the folder is being read
  std::vector<std::pair<int64_t, fs::path>> older;  // other pair folders, by step
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string fn = e.path().filename().string();
    if (starts_with(fn, kTmpFolder) || starts_with(fn, name + ".tmp-")) stale.push_back(e.path());
    else if (is_pair_folder_name(fn, name) && fn != current && e.is_directory(ec) && !e.is_symlink(ec))
      older.emplace_back(pair_folder_step(fn, name), e.path());
  }
  std::sort(older.begin(), older.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < older.size(); ++i)
    if (static_cast<int64_t>(i) + 1 >= keep) stale.push_back(older[i].second);
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

// Points the symlink `link` at `target` atomically (a new link renamed over the old entry).
void switch_link(const fs::path& link, const std::string& target, const std::string& tmp_suffix) {
  if (link_target(link) == target) return;
  fs::path tmp = link.parent_path() / (link.filename().string() + ".tmp-" + tmp_suffix);
  ::unlink(tmp.c_str());
  KILN_CHECK(::symlink(target.c_str(), tmp.c_str()) == 0, "checkpoint: cannot create the link ", tmp.string(), ": ",
             errno_str());
  if (std::rename(tmp.c_str(), link.c_str()) != 0) {
    std::string err = errno_str();
    ::unlink(tmp.c_str());
    KILN_FAIL("checkpoint: cannot switch ", link.string(), " to ", target, ": ", err);
  }
}

// The stem of the one `*.state.safetensors` in a checkpoint folder ("" when there is none or several).
std::string folder_stem(const fs::path& folder) {
  std::string stem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    std::string fn = e.path().filename().string();
    if (!ends_with(fn, kStateExt)) continue;
    if (!stem.empty()) return "";
    stem = fn.substr(0, fn.size() - kStateExt.size());
  }
  return stem;
}

// `runs/x/last` (the symlink) or `runs/x/last-12` (the folder it names): a folder holding one pair.
bool is_pair_folder(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return false;
  std::string stem = folder_stem(p);
  return !stem.empty() && (fs::is_symlink(p, ec) || is_pair_folder_name(p.filename().string(), stem));
}

// Refuses NaN/inf in any floating tensor of a file, naming the file, the tensor and the first bad element.
void check_finite(const std::map<std::string, Tensor>& tensors, const std::string& file, const char* what) {
  for (const auto& [name, t] : tensors) {
    if (!is_floating(t.dtype()) || ops::all_finite(t)) continue;
    std::vector<double> v = t.to_double_vector();
    size_t i = 0;
    while (i < v.size() && std::isfinite(v[i])) ++i;
    KILN_FAIL(what, " '", file, "': tensor '", name, "' holds a non-finite value (", i < v.size() ? v[i] : NAN,
              " at flat index ", i, " of ", t.str(), "); the run that wrote it diverged or the file is damaged. "
              "Resume from an earlier checkpoint, or lower the learning rate (optim.lr)");
  }
}

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
// tools/deploy/checkpoint_legacy.h).
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

// The "step" metadata entry of a checkpoint file, as a number.
int64_t metadata_step(const SafetensorsContents& c, const std::string& file) {
  auto it = c.metadata.find("step");
  KILN_CHECK(it != c.metadata.end(), "checkpoint '", file, "' has no step in its metadata (key \"step\"); "
             "is it a kiln checkpoint?");
  int64_t step = -1;
  size_t used = 0;
  try {
    step = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KILN_CHECK(used > 0 && used == it->second.size() && step >= 0, "checkpoint '", file, "': metadata step = \"",
             it->second, "\" is not a step count (an integer >= 0)");
  return step;
}

}  // namespace

void save_checkpoint(const std::string& base, Module& model, const TrainingState& s, Module* ema, int64_t keep) {
  const fs::path b(base);
  const fs::path dir = b.parent_path().empty() ? fs::path(".") : b.parent_path();
  const std::string name = b.filename().string();
  KILN_CHECK(!name.empty() && name != "." && name != "..", "checkpoint: '", base, "' does not name a checkpoint");
  // best_top1: for readers of earlier kiln, the best where it is a top-1
  const double best_top1 = !s.best.metric.empty() && s.best.metric.find("top1") != std::string::npos ? s.best.best : -1;
  json meta = {{"epoch", s.epoch},       {"step", s.step},           {"rng_seed", s.rng.seed},
               {"rng_offset", s.rng.offset}, {"best_top1", best_top1}, {"scaler", s.scaler},
               {"optimizer_type", s.optimizer.type}, {"optimizer_scalars", s.optimizer.scalars},
               {"config", s.config}, {"flatten_order", kFlattenOrderChw}, {"epoch_step", s.epoch_step},
               {"progress", s.progress}, {"kiln_version", kiln_version()},
               {"best", metric_record_json(s.best)}, {"early_stopping", metric_record_json(s.early_stopping)},
               {"stopped_early", s.stopped_early}};
  KILN_CHECK(keep >= 1, "checkpoint: keep = ", keep, " is not accepted; accepted: 1 or more pair folders");
  remove_stale(dir, name, keep);

  // 1. Both files into a fresh folder (save_safetensors fsyncs each file and the folder).
  std::string tmp = (dir / (kTmpFolder + "XXXXXX")).string();
  KILN_CHECK(::mkdtemp(tmp.data()) != nullptr, "checkpoint: cannot create a folder in ", dir.string(), ": ", errno_str());
  const std::string suffix = tmp.substr(tmp.size() - 6);
  try {
    save_safetensors((fs::path(tmp) / (name + kStateExt)).string(), s.optimizer.tensors,
                     {{"kiln_training_state", meta.dump()}, {"step", std::to_string(s.step)}});
    save_safetensors((fs::path(tmp) / (name + kExt)).string(), export_pytorch_state_dict(model),
                     {{"format", "pt"}, {"step", std::to_string(s.step)}, {"kiln_model", s.config.value("model", json()).dump()}});
    if (ema)
      save_safetensors((fs::path(tmp) / (name + kEmaExt)).string(), export_pytorch_state_dict(*ema),
                       {{"format", "pt"}, {"step", std::to_string(s.step)}, {"kiln_model", s.config.value("model", json()).dump()},
                        {"kiln_weights", "ema"}});
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }

  // 2. The folder gets its final name (a new one: the pair `name` names is never touched).
  const std::string current = link_target(dir / name);
  std::string folder = name + "-" + std::to_string(s.step);
  for (int k = 1; folder == current || fs::exists(dir / folder); ++k) folder = name + "-" + std::to_string(s.step) + "." + std::to_string(k);
  if (std::rename(tmp.c_str(), (dir / folder).c_str()) != 0) {
    std::string err = errno_str();
    std::error_code ec;
    fs::remove_all(tmp, ec);
    KILN_FAIL("checkpoint: renaming ", tmp, " to ", (dir / folder).string(), " failed: ", err);
  }
  fsync_dir(dir);

  // 3. The switch: one rename of a symlink. Before it `name` is the previous pair, after it the new one.
  switch_link(dir / name, folder, suffix);
  // Fixed links for readers of the flat layout (replace a flat file of an older run atomically).
  switch_link(dir / (name + kExt), name + "/" + name + kExt, suffix);
  switch_link(dir / (name + kStateExt), name + "/" + name + kStateExt, suffix);
  if (ema) switch_link(dir / (name + kEmaExt), name + "/" + name + kEmaExt, suffix);
  else if (!link_target(dir / (name + kEmaExt)).empty()) ::unlink((dir / (name + kEmaExt)).c_str());
  fsync_dir(dir);
  remove_stale(dir, name, keep);
}

CheckpointFiles checkpoint_files(const std::string& base) {
  if (!fs::is_directory(base)) return {base + kExt, base + kStateExt, base + kEmaExt};
  // Resolve the symlink once, so both files come from the same folder even if a save switches it.
  fs::path folder = base;
  if (std::string t = link_target(folder); !t.empty()) folder = fs::path(t).is_absolute() ? fs::path(t) : folder.parent_path() / t;
  std::string stem = folder_stem(folder);
  KILN_CHECK(!stem.empty(), "checkpoint '", base, "': the folder ", folder.string(), " must hold one <name>", kStateExt,
             " and its <name>", kExt, "; is it a kiln checkpoint?");
  return {(folder / (stem + kExt)).string(), (folder / (stem + kStateExt)).string(), (folder / (stem + kEmaExt)).string()};
}

std::string resolve_checkpoint(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  if (is_pair_folder(p)) return p;
  // A run folder: its last checkpoint (a folder in this layout, a flat pair in earlier runs).
  if (fs::is_directory(p) && (fs::is_directory(p + "/last") || fs::exists(p + "/last" + kExt))) p += "/last";
  if (ends_with(p, kStateExt)) p = p.substr(0, p.size() - kStateExt.size());
  else if (ends_with(p, kExt)) p = p.substr(0, p.size() - kExt.size());
  if (fs::is_directory(p)) {
    checkpoint_files(p);  // throws when the folder holds no pair
    return p;
  }
  KILN_CHECK(fs::exists(p + kExt), "checkpoint '", path, "': ", p, kExt, " does not exist; "
             "accepted: a run folder (runs/<name>), runs/<name>/last or runs/<name>/best");
  // A file inside a pair folder `last-12/last.safetensors`: the folder, whose parent is the run.
  fs::path parent = fs::path(p).parent_path();
  if (is_pair_folder_name(parent.filename().string(), fs::path(p).filename().string())) return parent.string();
  return p;
}

std::string run_weights_checkpoint(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  if (fs::is_directory(p) && !is_pair_folder(p) && (fs::is_directory(p + "/best") || fs::exists(p + "/best" + kExt)))
    return resolve_checkpoint(p + "/best");
  return resolve_checkpoint(path);
}

void load_weights(const std::string& path, Module& model) {
  std::string file = path;
  if (!fs::is_regular_file(file)) file = checkpoint_files(run_weights_checkpoint(path)).weights;
  SafetensorsContents c = load_safetensors(file);
  check_finite(c.tensors, file, "weights");
  try {
    import_pytorch_state_dict(model, c.tensors, /*strict=*/true);
  } catch (const Error& e) {
    KILN_FAIL("weights '", file, "' do not fit the model: ", e.what());
  }
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
  const int64_t state_step = metadata_step(st, f.state);
  KILN_CHECK(state_step == s.step, "checkpoint '", f.state, "': metadata step ", state_step,
             " differs from the training state's step ", s.step);
  for (const auto& [name, t] : st.tensors)
    KILN_CHECK(t.dtype() == DType::f32, "checkpoint '", f.state, "': optimizer tensor '", name, "' is ", t.str(),
               "; optimizer state is F32");
  check_finite(st.tensors, f.state, "checkpoint");

  // The weights (and the EMA's): from the state's step, finite, fitting the model.
  auto load_into = [&](Module& m, const std::string& file, const char* what) {
    SafetensorsContents w = load_safetensors(file);
    const int64_t weights_step = metadata_step(w, file);
    KILN_CHECK(weights_step == s.step, "checkpoint '", base, "': the ", what, " ", file, " (step ", weights_step,
               ") and the training state ", f.state, " (step ", s.step, ") are from different steps; was a save interrupted?");
    check_finite(w.tensors, file, "checkpoint");
    try {
      import_pytorch_state_dict(m, w.tensors, /*strict=*/true);
    } catch (const Error& e) {
      KILN_FAIL("checkpoint '", file, "' does not fit the model: ", e.what());
    }
  };
  load_into(model, f.weights, "weights");
  if (ema && fs::exists(f.ema)) {
    load_into(*ema, f.ema, "EMA weights");
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

std::string checkpoint_pair_path(const std::string& base) {
  const std::string target = link_target(base);
  return target.empty() || fs::path(target).has_parent_path() ? base : (fs::path(base).parent_path() / target).string();
}

}  // namespace kiln
