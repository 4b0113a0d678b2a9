// A sweep's table (summary.h): each run's figures from its folder, the mean and sample std per variant,
// written as Markdown, CSV and JSON, and the two plots (tools/sweep/sweep_plot.h).
#include "tools/sweep/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tools/engine/metrics.h"  // write_file_atomically
#include "tools/sweep/sweep_plot.h"

namespace fs = std::filesystem;

namespace kiln::sweep {

namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ',') out.emplace_back();
    else if (c != '\r') out.back() += c;
  }
  return out;
}

// metrics.csv by column ("" and text that is not a number read as NaN).
std::map<std::string, std::vector<double>> read_metrics_csv(const fs::path& file) {
  std::map<std::string, std::vector<double>> cols;
  std::ifstream in(file);
  std::string line;
  if (!std::getline(in, line)) return cols;
  const std::vector<std::string> header = split_csv_line(line);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::vector<std::string> cells = split_csv_line(line);
    if (cells.size() != header.size()) continue;  // a row cut short by a kill
    for (size_t i = 0; i < header.size(); ++i) {
      char* end = nullptr;
      const double v = std::strtod(cells[i].c_str(), &end);
      cols[header[i]].push_back(end && *end == 0 && !cells[i].empty() ? v : NAN);
    }
  }
  return cols;
}

// The wall minutes of the run's invocations that ended (start row to end row).
double invocation_minutes(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  double start = NAN, total = 0;
  bool any = false;
  while (std::getline(in, line)) {
    const json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object() || !row.contains("time") || !row["time"].is_number()) continue;
    if (row.value("event", "") == "start") start = row["time"].get<double>();
    else if (row.value("event", "") == "end" && std::isfinite(start)) {
      total += row["time"].get<double>() - start;
      start = NAN;
      any = true;
    }
  }
  return any ? total / 60 : NAN;
}

// The run's own final figures (`kiln train`'s "final:" line: with train.tta the test-time-augmented
// evaluation, which metrics.csv does not hold), from the last end record that has them; they are the
// final, and count for the best.
void apply_final_record(const fs::path& file, RunMetrics& m) {
  std::ifstream in(file);
  std::string line;
  json last;
  while (std::getline(in, line)) {
    const json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_object() && row.value("event", "") == "end" && row.contains("val_top1") && row["val_top1"].is_number())
      last = row;
  }
  if (last.is_null() || !m.has_metrics) return;
  auto number = [&](const char* k) { return last.contains(k) && last[k].is_number() ? last[k].get<double>() : NAN; };
  m.final_top1 = 100 * number("val_top1");
  if (std::isfinite(number("val_top5"))) m.final_top5 = 100 * number("val_top5");
  if (std::isfinite(number("val_loss"))) m.final_loss = number("val_loss");
  m.final_tta = last.value("tta", std::string("none"));
  m.best_top1 = std::fmax(m.best_top1, m.final_top1);
  m.best_top5 = std::fmax(m.best_top5, m.final_top5);
  m.best_loss = std::fmin(m.best_loss, m.final_loss);
}

std::string num(double v, const char* f = "%.2f") {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "91.23 ± 0.14" (n >= 2), "91.23" (n = 1), "–" (n = 0).
std::string pm(const Stat& s, const char* f = "%.2f") {
  if (s.n == 0) return "–";
  return s.n < 2 ? num(s.mean, f) : num(s.mean, f) + " ± " + num(s.std, f);
}

json stat_json(const Stat& s) {
  auto v = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  return {{"n", s.n}, {"mean", v(s.mean)}, {"std", v(s.std)}};
}

}  // namespace

RunMetrics read_run(const std::string& run_dir) {
  RunMetrics m;
  const auto cols = read_metrics_csv(fs::path(run_dir) / "metrics.csv");
  auto col = [&](const std::string& k) { return cols.count(k) ? cols.at(k) : std::vector<double>(); };
  const std::vector<double> epoch = col("epoch"), top1 = col("val_top1"), top5 = col("val_top5"), loss = col("val_loss");
  m.epochs = static_cast<int64_t>(epoch.size());
  for (size_t i = 0; i < top1.size(); ++i) {
    if (!std::isfinite(top1[i])) continue;  // an epoch without evaluation
    m.has_metrics = true;
    m.final_top1 = 100 * top1[i];
    m.final_top5 = i < top5.size() ? 100 * top5[i] : NAN;
    m.final_loss = i < loss.size() ? loss[i] : NAN;
    m.best_top1 = std::isfinite(m.best_top1) ? std::max(m.best_top1, m.final_top1) : m.final_top1;
    if (std::isfinite(m.final_top5)) m.best_top5 = std::isfinite(m.best_top5) ? std::max(m.best_top5, m.final_top5) : m.final_top5;
    if (std::isfinite(m.final_loss)) m.best_loss = std::isfinite(m.best_loss) ? std::min(m.best_loss, m.final_loss) : m.final_loss;
    m.curve_epoch.push_back(i < epoch.size() ? epoch[i] : static_cast<double>(i + 1));
    m.curve_top1.push_back(m.final_top1);
  }
  apply_final_record(fs::path(run_dir) / "invocations.jsonl", m);
  const Stat ips = mean_std(col("images_per_s"));
  m.images_per_s = ips.mean;
  m.minutes = invocation_minutes(fs::path(run_dir) / "invocations.jsonl");
  if (!std::isfinite(m.minutes) && !col("epoch_seconds").empty()) {
    double s = 0;
    for (double x : col("epoch_seconds")) s += std::isfinite(x) ? x : 0;
    m.minutes = s / 60;
  }
  return m;
}

Stat mean_std(const std::vector<double>& values) {
  Stat s;
  double sum = 0;
  for (double v : values)
    if (std::isfinite(v)) sum += v, ++s.n;
  if (s.n == 0) return s;
  s.mean = sum / static_cast<double>(s.n);
  if (s.n < 2) return s;
  double ss = 0;
  for (double v : values)
    if (std::isfinite(v)) ss += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(ss / static_cast<double>(s.n - 1));
  return s;
}

Summary summarize(const SweepPlan& plan, const std::vector<std::string>& running) {
  Summary s;
  s.name = plan.name;
  for (const PlannedRun& r : planned_runs(plan)) {
    RunRow row{r, run_status(plan.dir, r.name), read_run((fs::path(plan.dir) / r.name).string())};
    if (std::find(running.begin(), running.end(), r.name) != running.end()) row.status.state = RunState::running;
    s.runs.push_back(row);
  }
  int best = -1;
  for (const Variant& v : plan.variants) {
    VariantRow vr;
    vr.variant = &v;
    std::map<std::string, std::vector<double>> x;
    for (const RunRow& r : s.runs) {
      if (plan.variants[r.run.variant].label != v.label) continue;
      ++vr.planned;
      if (r.status.state != RunState::finished || !r.metrics.has_metrics) continue;
      ++vr.finished;
      const RunMetrics& m = r.metrics;
      for (auto [k, val] : {std::pair{"final_top1", m.final_top1}, {"final_top5", m.final_top5}, {"final_loss", m.final_loss},
                            {"best_top1", m.best_top1}, {"best_top5", m.best_top5}, {"best_loss", m.best_loss},
                            {"minutes", m.minutes}, {"images_per_s", m.images_per_s}})
        x[k].push_back(val);
    }
    vr.final_top1 = mean_std(x["final_top1"]), vr.final_top5 = mean_std(x["final_top5"]);
    vr.final_loss = mean_std(x["final_loss"]), vr.best_top1 = mean_std(x["best_top1"]);
    vr.best_top5 = mean_std(x["best_top5"]), vr.best_loss = mean_std(x["best_loss"]);
    vr.minutes = mean_std(x["minutes"]), vr.images_per_s = mean_std(x["images_per_s"]);
    if (v.has_expected && vr.final_top1.n > 0) {
      vr.expected_diff = vr.final_top1.mean - v.expected.top1;
      vr.within_2std = vr.final_top1.n >= 2 && std::fabs(vr.expected_diff) <= 2 * vr.final_top1.std;
    }
    if (vr.final_top1.n > 0 && (best < 0 || vr.final_top1.mean > s.variants[best].final_top1.mean))
      best = static_cast<int>(s.variants.size());
    s.variants.push_back(vr);
  }
  if (best >= 0) s.variants[best].best = true;
  return s;
}

std::string summary_markdown(const Summary& s) {
  std::ostringstream os;
  os << "# Sweep " << s.name << "\n\n"
     << "Mean ± sample standard deviation over the finished seeds (top-1 and top-5 in %; final: the run's final "
        "evaluation, as kiln train prints it (with train.tta the test-time-augmented one), else its last evaluated "
        "epoch; best: the best of those). ★ marks the best variant by mean final top-1.\n\n"
     << "| variant | seeds | final top-1 | final top-5 | final loss | best top-1 | best top-5 | best loss | minutes | "
        "images/s | parameters | expected top-1 | difference | within 2 std |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const VariantRow& v : s.variants) {
    const Variant& var = *v.variant;
    os << "| " << var.label << (v.best ? " ★" : "") << " | " << v.finished << " of " << v.planned << " | "
       << pm(v.final_top1) << " | " << pm(v.final_top5) << " | " << pm(v.final_loss, "%.4f") << " | " << pm(v.best_top1)
       << " | " << pm(v.best_top5) << " | " << pm(v.best_loss, "%.4f") << " | " << pm(v.minutes, "%.1f") << " | "
       << pm(v.images_per_s, "%.0f") << " | " << var.params << " | ";
    if (var.has_expected)
      os << num(var.expected.top1) << " (" << var.expected.source << ") | "
         << (std::isfinite(v.expected_diff) ? (v.expected_diff >= 0 ? "+" : "") + num(v.expected_diff) : "–") << " | "
         << (v.final_top1.n < 2 ? "– (needs 2 seeds)" : v.within_2std ? "yes" : "no") << " |\n";
    else
      os << "– | – | – |\n";
  }
  os << "\nVariants: ";
  for (size_t i = 0; i < s.variants.size(); ++i) {
    const Variant& v = *s.variants[i].variant;
    os << (i ? "; " : "") << v.label << " = " << (v.overrides.empty() ? "the base config" : join(v.overrides, " "));
  }
  os << "\n\n## Runs\n\n| run | variant | seed | state | epochs | final top-1 | best top-1 | minutes |\n|---|---|---|---|---|---|---|---|\n";
  for (const RunRow& r : s.runs) {
    os << "| " << r.run.name << " | " << s.variants[r.run.variant].variant->label << " | " << r.run.seed << " | "
       << state_name(r.status.state) << (r.status.error.empty() ? "" : ": " + r.status.error) << " | " << r.metrics.epochs
       << " | " << num(r.metrics.final_top1) << " | " << num(r.metrics.best_top1) << " | " << num(r.metrics.minutes, "%.1f")
       << " |\n";
  }
  os << "\nPlots: top1.png (final top-1 per variant, mean ± 1 std), curves.png (validation top-1 by epoch, every seed).\n";
  return os.str();
}

std::string summary_csv(const Summary& s) {
  std::ostringstream os;
  os << "variant,seeds_finished,seeds_planned";
  for (const char* k : {"final_top1", "final_top5", "final_loss", "best_top1", "best_top5", "best_loss", "minutes", "images_per_s"})
    os << "," << k << "_mean," << k << "_std";
  os << ",parameters,best,expected_top1,expected_source,difference,within_2std\n";
  for (const VariantRow& v : s.variants) {
    const Variant& var = *v.variant;
    os << var.label << "," << v.finished << "," << v.planned;
    for (const Stat* st : {&v.final_top1, &v.final_top5, &v.final_loss, &v.best_top1, &v.best_top5, &v.best_loss, &v.minutes,
                           &v.images_per_s})
      os << "," << num(st->mean, "%.6g") << "," << num(st->std, "%.6g");
    std::string source = var.expected.source;
    if (source.find_first_of(",\"") != std::string::npos) {  // RFC 4180 quoting
      std::string q = "\"";
      for (char c : source) q += c == '"' ? std::string("\"\"") : std::string(1, c);
      source = q + "\"";
    }
    os << "," << var.params << "," << (v.best ? 1 : 0) << ","
       << (var.has_expected ? num(var.expected.top1, "%.6g") + "," + source + "," + num(v.expected_diff, "%.6g") + "," +
                                  (v.final_top1.n < 2 ? "" : v.within_2std ? "1" : "0")
                            : ",,,")
       << "\n";
  }
  return os.str();
}

json summary_json(const Summary& s) {
  auto v = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  json variants = json::array(), runs = json::array();
  for (const VariantRow& r : s.variants) {
    json j = {{"label", r.variant->label}, {"overrides", r.variant->overrides}, {"seeds_finished", r.finished},
              {"seeds_planned", r.planned}, {"final_top1", stat_json(r.final_top1)}, {"final_top5", stat_json(r.final_top5)},
              {"final_loss", stat_json(r.final_loss)}, {"best_top1", stat_json(r.best_top1)},
              {"best_top5", stat_json(r.best_top5)}, {"best_loss", stat_json(r.best_loss)},
              {"minutes", stat_json(r.minutes)}, {"images_per_s", stat_json(r.images_per_s)},
              {"parameters", r.variant->params}, {"best", r.best}};
    if (r.variant->has_expected)
      j["expected"] = {{"top1", r.variant->expected.top1}, {"source", r.variant->expected.source},
                       {"difference", v(r.expected_diff)},
                       {"within_2std", r.final_top1.n < 2 ? json(nullptr) : json(r.within_2std)}};
    variants.push_back(j);
  }
  for (const RunRow& r : s.runs) {
    json j = {{"run", r.run.name}, {"variant", s.variants[r.run.variant].variant->label}, {"seed", r.run.seed},
              {"state", state_name(r.status.state)}, {"epochs", r.metrics.epochs}, {"final_top1", v(r.metrics.final_top1)},
              {"final_top5", v(r.metrics.final_top5)}, {"final_loss", v(r.metrics.final_loss)},
              {"best_top1", v(r.metrics.best_top1)}, {"minutes", v(r.metrics.minutes)},
              {"images_per_s", v(r.metrics.images_per_s)}};
    if (!r.status.error.empty()) j["error"] = r.status.error;
    runs.push_back(j);
  }
  return {{"sweep", s.name}, {"units", "top1/top5 in percent, minutes of wall time"}, {"variants", variants}, {"runs", runs}};
}

void write_summary(const Summary& s, const std::string& dir) {
  const fs::path d(dir);
  write_file_atomically((d / "summary.md").string(), summary_markdown(s));
  write_file_atomically((d / "summary.csv").string(), summary_csv(s));
  write_file_atomically((d / "summary.json").string(), summary_json(s).dump(2) + "\n");
  std::vector<std::string> labels;
  std::vector<double> means, stds;
  std::vector<CurveGroup> curves;
  for (const VariantRow& v : s.variants) {
    labels.push_back(v.variant->label);
    means.push_back(v.final_top1.mean);
    stds.push_back(v.final_top1.std);
    curves.push_back(CurveGroup{v.variant->label, {}});
  }
  for (const RunRow& r : s.runs)
    if (!r.metrics.curve_top1.empty()) curves[r.run.variant].curves.push_back({r.metrics.curve_epoch, r.metrics.curve_top1});
  save_error_bars_png((d / "top1.png").string(), "sweep " + s.name + ": final val top-1 (%), mean +- 1 std", labels, means, stds);
  save_curves_png((d / "curves.png").string(), "sweep " + s.name + ": val top-1 (%) by epoch, every seed", curves, "epoch");
}

}  // namespace kiln::sweep
