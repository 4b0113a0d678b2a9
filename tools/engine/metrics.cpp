#include "tools/engine/metrics.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <opencv2/imgproc.hpp>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "data/image_encode.h"
#include "tools/engine/tensorboard.h"

namespace fs = std::filesystem;

namespace kiln {

std::string make_run_dir(const std::string& root, const std::string& name) {
  std::error_code ec;
  fs::create_directories(root, ec);
  KILN_CHECK(!ec, "cannot create the runs folder '", root, "': ", ec.message());
  for (int i = 1; i < 100000; ++i) {
    fs::path p = fs::path(root) / (i == 1 ? name : name + "-" + std::to_string(i));
    if (fs::create_directory(p, ec)) return p.string();
    KILN_CHECK(!ec, "cannot create run folder '", p.string(), "': ", ec.message());
  }
  KILN_FAIL("no free run folder name under ", root, " for ", name);
}

namespace {

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.8g", v);
  return buf;
}

std::string json_num(double v) { return std::isfinite(v) ? num(v) : "null"; }

// Unix seconds to the millisecond (%.8g would round today's 1.77e9 to 100 s).
std::string time_num(double t) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", t);
  return buf;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The TensorBoard tags of an epoch row's columns (the others are not charted per epoch).
const std::map<std::string, std::string>& epoch_tags() {
  static const std::map<std::string, std::string> tags{
      {"val_loss", "val/loss"},         {"val_top1", "val/top1"},         {"val_top5", "val/top5"},
      {"ema_val_loss", "ema/val_loss"}, {"ema_val_top1", "ema/val_top1"}, {"ema_val_top5", "ema/val_top5"},
      {"train_loss", "epoch/train_loss"}, {"train_acc", "epoch/train_acc"}};
  return tags;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& dir, int64_t resumed_step, bool tensorboard) : dir_(dir) {
  if (resumed_step >= 0) truncate_after(resumed_step);
  std::ifstream in(dir + "/metrics.csv");
  std::string line;
  if (in && std::getline(in, line)) {  // resumed run: keep the history for the plots
    std::stringstream hs(line);
    std::string col;
    while (std::getline(hs, col, ',')) header_.push_back(col);
    while (std::getline(in, line)) {
      std::stringstream rs(line);
      std::string cell;
      for (size_t i = 0; i < header_.size() && std::getline(rs, cell, ','); ++i)
        columns_[header_[i]].push_back(std::strtod(cell.c_str(), nullptr));
    }
  }
  std::ifstream jl(dir + "/metrics.jsonl");
  while (std::getline(jl, line)) {  // the step rows, for the plots
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("kind", "") != "step") continue;
    auto get = [&](const char* k) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN; };
    StepRow s;
    s.step = static_cast<int64_t>(get("step"));
    s.epoch = static_cast<int64_t>(get("epoch"));
    s.loss = get("loss");
    s.acc = get("acc");
    s.lr = get("lr");
    s.images_per_s = get("images_per_s");
    s.data_wait_share = get("data_wait_share");
    s.loss_scale = get("loss_scale");
    s.time = get("time");
    steps_.push_back(s);
  }
  if (tensorboard) {
    events_ = std::make_unique<EventWriter>(dir);
    if (resumed_step >= 0) events_->session_start(resumed_step + 1);
  }
}

MetricsLog::~MetricsLog() = default;

// metrics.csv keeps its header and the rows whose step is at most `step`; metrics.jsonl the lines
// whose "step" is (a line that does not parse, the end of a killed write, goes too).
void MetricsLog::truncate_after(int64_t step) {
  const std::string csv_path = dir_ + "/metrics.csv", jl_path = dir_ + "/metrics.jsonl";
  if (std::ifstream(csv_path).good()) {
    std::stringstream in(read_all(csv_path));
    std::string header, line, kept;
    std::getline(in, header);
    std::vector<std::string> cols;
    std::stringstream hs(header);
    for (std::string c; std::getline(hs, c, ',');) cols.push_back(c);
    const auto at = std::find(cols.begin(), cols.end(), "step");
    const size_t k = static_cast<size_t>(at - cols.begin());
    bool dropped = false;
    while (std::getline(in, line)) {
      std::stringstream rs(line);
      std::string cell;
      for (size_t i = 0; i <= k && std::getline(rs, cell, ','); ++i) {
      }
      const bool keep = at == cols.end() || std::strtod(cell.c_str(), nullptr) <= static_cast<double>(step);
      if (keep) kept += line + "\n";
      dropped |= !keep;
    }
    if (dropped) write_file_atomically(csv_path, header.empty() ? "" : header + "\n" + kept);
  }
  if (std::ifstream(jl_path).good()) {
    std::stringstream in(read_all(jl_path));
    std::string line, kept;
    bool dropped = false;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      const bool keep = j.is_object() && j.contains("step") && j["step"].is_number() &&
                        j["step"].get<double>() <= static_cast<double>(step);
      if (keep) kept += line + "\n";
      dropped |= !keep;
    }
    if (dropped) write_file_atomically(jl_path, kept);
  }
}

void MetricsLog::write(const std::vector<std::pair<std::string, double>>& row) {
  bool first = header_.empty();
  if (first)
    for (const auto& [k, v] : row) header_.push_back(k);
  std::ofstream csv(dir_ + "/metrics.csv", std::ios::app);
  std::ofstream jl(dir_ + "/metrics.jsonl", std::ios::app);
  KILN_CHECK(csv && jl, "cannot write metrics in ", dir_);
  if (first) {
    for (size_t i = 0; i < header_.size(); ++i) csv << (i ? "," : "") << header_[i];
    csv << "\n";
  }
  jl << "{\"kind\": \"epoch\"";
  std::vector<std::pair<std::string, double>> scalars;
  int64_t step = 0;
  for (size_t i = 0; i < header_.size(); ++i) {
    double v = NAN;
    for (const auto& [k, x] : row)
      if (k == header_[i]) v = x;
    csv << (i ? "," : "") << num(v);
    jl << ", \"" << header_[i] << "\": " << json_num(v);
    columns_[header_[i]].push_back(v);
    if (header_[i] == "step") step = static_cast<int64_t>(v);
    const auto tag = epoch_tags().find(header_[i]);
    if (tag != epoch_tags().end()) scalars.emplace_back(tag->second, v);
  }
  csv << "\n";
  jl << ", \"time\": " << time_num(unix_time()) << "}\n";
  if (events_) events_->scalars(step, scalars);
}

void MetricsLog::write_step(const StepSample& s) {
  const bool same_epoch = last_.epoch == s.epoch && last_.seen <= s.seen && last_.step < s.step;
  const StepSample prev = same_epoch ? last_ : StepSample{};
  last_ = s;
  const double seen = s.seen - prev.seen, secs = s.seconds - prev.seconds;
  if (!(seen > 0)) return;
  StepRow r;
  r.step = s.step;
  r.epoch = s.epoch + 1;
  r.loss = (s.loss_sum - prev.loss_sum) / seen;
  r.acc = (s.correct - prev.correct) / seen;
  r.lr = s.lr;
  r.images_per_s = secs > 0 ? seen * s.world / secs : NAN;
  r.data_wait_share = secs > 0 ? (s.wait_seconds - prev.wait_seconds) / secs : NAN;
  r.loss_scale = s.loss_scale > 0 ? s.loss_scale : NAN;
  r.time = unix_time();
  steps_.push_back(r);
  std::ofstream jl(dir_ + "/metrics.jsonl", std::ios::app);
  KILN_CHECK(jl.good(), "cannot write metrics in ", dir_);
  jl << "{\"kind\": \"step\", \"step\": " << r.step << ", \"epoch\": " << r.epoch << ", \"loss\": " << json_num(r.loss)
     << ", \"acc\": " << json_num(r.acc) << ", \"lr\": " << json_num(r.lr) << ", \"images_per_s\": "
     << json_num(r.images_per_s) << ", \"data_wait_share\": " << json_num(r.data_wait_share);
  if (s.loss_scale > 0) jl << ", \"loss_scale\": " << json_num(r.loss_scale);
  double blocked = NAN;
  if (s.blocked_seconds >= 0) {
    blocked = secs > 0 ? (s.blocked_seconds - std::max(prev.blocked_seconds, 0.0)) / secs : NAN;
    jl << ", \"host_blocked_share\": " << json_num(blocked);
  }
  jl << ", \"time\": " << time_num(r.time) << "}\n";
  if (events_)
    events_->scalars(r.step, {{"train/loss", r.loss},
                              {"train/acc", r.acc},
                              {"train/lr", r.lr},
                              {"train/images_per_s", r.images_per_s},
                              {"train/data_wait_share", r.data_wait_share},
                              {"train/loss_scale", r.loss_scale},
                              {"train/host_blocked_share", blocked}});
}

namespace {
std::string fmt(double v) {
  char buf[32];
  if (v != 0 && (std::fabs(v) < 1e-2 || std::fabs(v) >= 1e4)) std::snprintf(buf, sizeof buf, "%.1e", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}
// An x tick (a step or an epoch count, whole): "1200", "45k" from 10000 on, "1.5M" from a million.
std::string fmt_count(double v) {
  char buf[32];
  if (std::fabs(v) >= 1e6) std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
  else if (std::fabs(v) >= 1e4) std::snprintf(buf, sizeof buf, "%gk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}
}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    KILN_CHECK(f.good(), "cannot write '", tmp, "' (does its folder exist and is it writable?)");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    KILN_CHECK(f.good(), "writing '", tmp, "' failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    KILN_FAIL("cannot rename '", tmp, "' to '", path, "'");
  }
}

void MetricsLog::save_plots(const std::string& dir) const {
  auto col = [&](const char* k) { return columns_.count(k) ? columns_.at(k) : std::vector<double>{}; };
  // Validation figures at the steps their epochs ended; without step rows (a run from before they
  // were written) everything is by epoch.
  const bool by_step = !steps_.empty();
  const std::vector<double> ex = by_step ? col("step") : col("epoch");
  PlotSeries train_loss{"train", {}, {}, !by_step}, train_acc{"train", {}, {}, !by_step}, lr{"lr", {}, {}, !by_step};
  if (by_step) {
    for (const StepRow& s : steps_) {
      const auto x = static_cast<double>(s.step);
      train_loss.x.push_back(x);
      train_loss.y.push_back(s.loss);
      train_acc.x.push_back(x);
      train_acc.y.push_back(100 * s.acc);
      lr.x.push_back(x);
      lr.y.push_back(s.lr);
    }
  } else {
    train_loss.x = train_acc.x = lr.x = ex;
    train_loss.y = col("train_loss");
    lr.y = col("lr");
    for (double a : col("train_acc")) train_acc.y.push_back(100 * a);
  }
  PlotSeries val_loss{"val", ex, col("val_loss"), true}, val_top1{"val top-1", ex, {}, true};
  for (double a : col("val_top1")) val_top1.y.push_back(100 * a);
  const std::string xl = by_step ? "step" : "epoch";
  save_plot_png(dir + "/loss.png", "loss", {train_loss, val_loss}, xl, PlotKind::loss);
  save_plot_png(dir + "/accuracy.png", "accuracy (%)", {train_acc, val_top1}, xl, PlotKind::percent);
  save_plot_png(dir + "/lr.png", "learning rate", {lr}, xl, PlotKind::nonnegative);
}

double nice_step(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (m * mag >= raw * (1 - 1e-12)) return m * mag;
  return 10 * mag;
}

PlotAxis plot_axis(const std::vector<double>& values, PlotKind kind) {
  PlotAxis a;
  if (kind == PlotKind::percent) {
    a.hi = 100;
    a.step = 20;
    return a;
  }
  double hi = 0, pos_lo = INFINITY, pos_hi = 0;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    hi = std::max(hi, v);
    if (v > 0) {
      pos_lo = std::min(pos_lo, v);
      pos_hi = std::max(pos_hi, v);
    }
  }
  if (kind == PlotKind::loss && pos_hi > 0 && pos_hi > 10 * pos_lo) {  // spans more than a decade
    a.log = true;
    a.lo = std::pow(10.0, std::floor(std::log10(pos_lo)));
    a.hi = std::pow(10.0, std::ceil(std::log10(pos_hi)));
    return a;
  }
  // Zero to the first tick at or above the largest value plus a little room, in about 5 round steps.
  const double top = hi > 0 ? hi * 1.02 : 1;
  a.step = nice_step(top / 5);
  a.hi = std::ceil(top / a.step - 1e-9) * a.step;
  return a;
}

namespace {

// What the finite points of a plot's series span: the x range (widened when there are no points or
// one x) and their y values (for plot_axis).
struct PlotExtent {
  double x0 = INFINITY, x1 = -INFINITY;
  std::vector<double> ys;
};
PlotExtent plot_extent(const std::vector<PlotSeries>& series) {
  PlotExtent e;
  for (const PlotSeries& s : series)
    for (size_t i = 0; i < s.y.size() && i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
      e.ys.push_back(s.y[i]);
      e.x0 = std::min(e.x0, s.x[i]);
      e.x1 = std::max(e.x1, s.x[i]);
    }
  if (!std::isfinite(e.x0)) e.x0 = 0, e.x1 = 1;
  if (e.x1 - e.x0 < 1e-12) e.x0 -= 0.5, e.x1 += 0.5;
  return e;
}

}  // namespace

void save_plot_png(const std::string& path, const std::string& title, const std::vector<PlotSeries>& series,
                   const std::string& xlabel, PlotKind kind) {
  const int W = 800, H = 500, L = 80, R = 20, T = 50, B = 60;
  cv::Mat img(H, W, CV_8UC3, cv::Scalar(255, 255, 255));
  const PlotExtent extent = plot_extent(series);
  const double x0 = extent.x0, x1 = extent.x1;
  const PlotAxis ax = plot_axis(extent.ys, kind);
  auto ty = [&](double y) { return ax.log ? std::log10(y) : y; };
  const double lo = ty(ax.lo), hi = ty(ax.hi);
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (hi - ty(y)) / (hi - lo) * (H - T - B); };
  const auto font = cv::FONT_HERSHEY_SIMPLEX;
  cv::putText(img, title + (ax.log ? " (log scale)" : ""), {L, 30}, font, 0.7, {0, 0, 0}, 1, cv::LINE_AA);
  std::vector<double> yticks;
  if (ax.log) {
    for (double d = lo; d <= hi + 1e-9; d += std::max(1.0, std::ceil((hi - lo) / 8))) yticks.push_back(std::pow(10.0, d));
  } else {
    for (double y = ax.lo; y <= ax.hi + ax.step * 1e-6; y += ax.step) yticks.push_back(y);
  }
  for (double y : yticks) {  // y grid and labels
    int yy = static_cast<int>(py(y));
    cv::line(img, {L, yy}, {W - R, yy}, {225, 225, 225}, 1);
    cv::putText(img, fmt(y), {5, yy + 5}, font, 0.45, {60, 60, 60}, 1, cv::LINE_AA);
  }
  const double stepx = std::max(std::round(nice_step((x1 - x0) / 8)), 1.0);  // steps and epochs are whole numbers
  for (double x = std::ceil(x0 / stepx) * stepx; x <= x1 + 1e-9; x += stepx) {  // x ticks
    int xx = static_cast<int>(px(x));
    cv::line(img, {xx, H - B}, {xx, H - B + 5}, {0, 0, 0}, 1);
    const std::string label = fmt_count(x);
    cv::putText(img, label, {xx - 4 * static_cast<int>(label.size()), H - B + 22}, font, 0.45, {60, 60, 60}, 1,
                cv::LINE_AA);
  }
  cv::rectangle(img, {L, T}, {W - R, H - B}, {0, 0, 0}, 1);
  cv::putText(img, xlabel, {W / 2 - 20, H - 15}, font, 0.5, {0, 0, 0}, 1, cv::LINE_AA);
  const cv::Scalar colors[] = {{180, 119, 31}, {14, 127, 255}, {44, 160, 44}, {40, 39, 214}, {189, 103, 148}};
  auto drawable = [&](double y) { return std::isfinite(y) && (!ax.log || y > 0); };
  // The legend goes in the right-hand corner the lines leave free: the bottom one when the points
  // under it (the right-hand 180 pixels) lie mostly in the upper half (accuracy), else the top one.
  double under_y = 0;
  int under_n = 0;
  for (const PlotSeries& ps : series)
    for (size_t i = 0; i < ps.y.size() && i < ps.x.size(); ++i)
      if (drawable(ps.y[i]) && std::isfinite(ps.x[i]) && px(ps.x[i]) > W - R - 180) {
        under_y += py(ps.y[i]);
        ++under_n;
      }
  const bool legend_below = under_n > 0 && under_y / under_n < (T + H - B) / 2.0;
  const int legend_top = legend_below ? H - B - 10 - 20 * static_cast<int>(series.size()) : T;
  for (size_t s = 0; s < series.size(); ++s) {
    const PlotSeries& ps = series[s];
    cv::Scalar c = colors[s % 5];
    cv::Point prev;
    bool has_prev = false;
    for (size_t i = 0; i < ps.y.size() && i < ps.x.size(); ++i) {
      if (!drawable(ps.y[i]) || !std::isfinite(ps.x[i])) {
        has_prev = false;
        continue;
      }
      cv::Point p(static_cast<int>(px(ps.x[i])), static_cast<int>(py(ps.y[i])));
      if (ps.markers) cv::circle(img, p, 3, c, cv::FILLED, cv::LINE_AA);
      if (has_prev) cv::line(img, prev, p, c, ps.markers ? 2 : 1, cv::LINE_AA);
      prev = p;
      has_prev = true;
    }
    int ly = legend_top + 20 + 20 * static_cast<int>(s);
    cv::line(img, {W - R - 170, ly - 5}, {W - R - 145, ly - 5}, c, 2);
    cv::putText(img, ps.name, {W - R - 140, ly}, font, 0.5, {0, 0, 0}, 1, cv::LINE_AA);
  }
  cv::Mat rgb;
  cv::cvtColor(img, rgb, cv::COLOR_BGR2RGB);  // drawn with OpenCV's BGR colours
  const std::vector<uint8_t> png = encode_png(rgb.data, rgb.rows, rgb.cols, 3, 6, "plot " + path);
  write_file_atomically(path, std::string(png.begin(), png.end()));  // a viewer never sees half a plot
}

}  // namespace kiln
