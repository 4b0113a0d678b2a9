// `kiln compare` (compare.h).
#include "tools/sweep/compare.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "tools/deploy/config.h"
#include "tools/deploy/model_io.h"
#include "tools/engine/run_history.h"
#include "tools/sweep/summary.h"
#include "tools/sweep/sweep_plot.h"

namespace fs = std::filesystem;

namespace kiln::sweep {

namespace {

std::string cell(const json& v) {
  if (v.is_null()) return "–";
  std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  for (char& c : s)
    if (c == '|') c = '/';  // a Markdown cell
  return s;
}

std::string num(double v, const char* f) {
  if (!std::isfinite(v)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string compare_runs(const std::vector<std::string>& runs, const std::string& png) {
  KILN_CHECK(runs.size() >= 2, "kiln compare: give at least two run folders (runs/<name>), not ", runs.size());
  std::vector<json> configs;
  for (const std::string& r : runs) {
    KILN_CHECK(is_run_folder(r), "kiln compare: ", r, " is not a run folder (a folder holding config.json, as kiln train "
               "writes: runs/<name>, runs/<sweep>/<variant>-s<seed>)");
    configs.push_back(load_config_file((fs::path(r) / "config.json").string()));
  }
  // Each key that differs from the first run somewhere, with every run's value.
  std::map<std::string, std::vector<json>> values;
  for (size_t i = 1; i < runs.size(); ++i)
    for (const auto& [key, change] : changed_keys(configs[0], configs[i])) {
      if (key == "name") continue;
      auto [it, fresh] = values.try_emplace(key, std::vector<json>(runs.size(), json("<same as " + runs[0] + ">")));
      it->second[0] = change.first;
      it->second[i] = change.second;
    }
  for (auto& [key, v] : values)  // runs that did not differ from the first hold its value
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i].is_string() && v[i].get<std::string>() == "<same as " + runs[0] + ">") v[i] = v[0];
  std::ostringstream os;
  std::string header = "| |", rule = "|---|";
  for (const std::string& r : runs) header += " " + r + " |", rule += "---|";
  os << "keys that differ (" << values.size() << "):\n\n" << header << "\n" << rule << "\n";
  for (const auto& [key, v] : values) {
    os << "| " << key << " |";
    for (const json& x : v) os << " " << cell(x) << " |";
    os << "\n";
  }
  std::vector<RunMetrics> m;
  for (const std::string& r : runs) m.push_back(read_run(r));
  os << "\nfinal metrics (top-1, top-5 in %; final: the run's final evaluation, with train.tta the "
                    "test-time-augmented one, else the last evaluated epoch):\n\n" << header << "\n" << rule << "\n";
  auto row = [&](const char* name, auto get, const char* f) {
    os << "| " << name << " |";
    for (const RunMetrics& x : m) os << " " << num(get(x), f) << " |";
    os << "\n";
  };
  row("epochs", [](const RunMetrics& x) { return static_cast<double>(x.epochs); }, "%.0f");
  row("final top-1", [](const RunMetrics& x) { return x.final_top1; }, "%.2f");
  row("final top-5", [](const RunMetrics& x) { return x.final_top5; }, "%.2f");
  row("final loss", [](const RunMetrics& x) { return x.final_loss; }, "%.4f");
  row("best top-1", [](const RunMetrics& x) { return x.best_top1; }, "%.2f");
  row("minutes", [](const RunMetrics& x) { return x.minutes; }, "%.1f");
  row("images/s", [](const RunMetrics& x) { return x.images_per_s; }, "%.0f");
  if (!png.empty()) {
    std::vector<CurveGroup> groups;
    for (size_t i = 0; i < runs.size(); ++i)
      groups.push_back(CurveGroup{fs::path(runs[i]).lexically_normal().filename().string(), {{m[i].curve_epoch, m[i].curve_top1}}});
    save_curves_png(png, "val top-1 (%) by epoch", groups, "epoch");
    os << "\ncurves: " << png << "\n";
  }
  return os.str();
}

}  // namespace kiln::sweep
