// Checkpoint files: a pair's write (a folder per pair, one symlink switch), which checkpoint a path
// names, and the weights' load (every tensor checked). Layout and guarantees: tools/deploy/checkpoint.h;
// the training state inside the pair: tools/engine/training_checkpoint.cpp.
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
#include "layers/interop.h"

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

}  // namespace

void write_checkpoint_pair(const std::string& base, const CheckpointPair& pair, int64_t keep) {
  const fs::path b(base);
  const fs::path dir = b.parent_path().empty() ? fs::path(".") : b.parent_path();
  const std::string name = b.filename().string();
  KILN_CHECK(!name.empty() && name != "." && name != "..", "checkpoint: '", base, "' does not name a checkpoint");
  KILN_CHECK(pair.model, "checkpoint '", base, "': no model to save");
  KILN_CHECK(keep >= 1, "checkpoint: keep = ", keep, " is not accepted; accepted: 1 or more pair folders");
  remove_stale(dir, name, keep);

  // 1. Both files into a fresh folder (save_safetensors fsyncs each file and the folder).
  std::string tmp = (dir / (kTmpFolder + "XXXXXX")).string();
  KILN_CHECK(::mkdtemp(tmp.data()) != nullptr, "checkpoint: cannot create a folder in ", dir.string(), ": ", errno_str());
  const std::string suffix = tmp.substr(tmp.size() - 6);
  try {
    const std::string step = std::to_string(pair.step), model = pair.model_config.dump();
    save_safetensors((fs::path(tmp) / (name + kStateExt)).string(), pair.state_tensors,
                     {{"kiln_training_state", pair.state.dump()}, {"step", step}});
    save_safetensors((fs::path(tmp) / (name + kExt)).string(), export_pytorch_state_dict(*pair.model),
                     {{"format", "pt"}, {"step", step}, {"kiln_model", model}});
    if (pair.ema)
      save_safetensors((fs::path(tmp) / (name + kEmaExt)).string(), export_pytorch_state_dict(*pair.ema),
                       {{"format", "pt"}, {"step", step}, {"kiln_model", model}, {"kiln_weights", "ema"}});
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }

  // 2. The folder gets its final name (a new one: the pair `name` names is never touched).
  const std::string current = link_target(dir / name);
  std::string folder = name + "-" + std::to_string(pair.step);
  for (int k = 1; folder == current || fs::exists(dir / folder); ++k) folder = name + "-" + std::to_string(pair.step) + "." + std::to_string(k);
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
  if (pair.ema) switch_link(dir / (name + kEmaExt), name + "/" + name + kEmaExt, suffix);
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
  check_finite_tensors(c.tensors, file, "weights");
  try {
    import_pytorch_state_dict(model, c.tensors, /*strict=*/true);
  } catch (const Error& e) {
    KILN_FAIL("weights '", file, "' do not fit the model: ", e.what());
  }
}

void check_finite_tensors(const std::map<std::string, Tensor>& tensors, const std::string& file, const char* what) {
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

int64_t checkpoint_file_step(const SafetensorsContents& c, const std::string& file) {
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

void load_pair_weights(const std::string& base, const std::string& file, const std::string& state_file, int64_t step,
                       Module& m, const char* what) {
  SafetensorsContents w = load_safetensors(file);
  const int64_t weights_step = checkpoint_file_step(w, file);
  KILN_CHECK(weights_step == step, "checkpoint '", base, "': the ", what, " ", file, " (step ", weights_step,
             ") and the training state ", state_file, " (step ", step, ") are from different steps; was a save interrupted?");
  check_finite_tensors(w.tensors, file, "checkpoint");
  try {
    import_pytorch_state_dict(m, w.tensors, /*strict=*/true);
  } catch (const Error& e) {
    KILN_FAIL("checkpoint '", file, "' does not fit the model: ", e.what());
  }
}

std::string checkpoint_pair_path(const std::string& base) {
  const std::string target = link_target(base);
  return target.empty() || fs::path(target).has_parent_path() ? base : (fs::path(base).parent_path() / target).string();
}

}  // namespace kiln
