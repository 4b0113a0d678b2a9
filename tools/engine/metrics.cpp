#include "tools/engine/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <opencv2/imgproc.hpp>
#include <sstream>

#include "core/check.h"
#include "data/image_encode.h"

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

MetricsLog::MetricsLog(const std::string& dir) : dir_(dir) {
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
  jl << "{";
  for (size_t i = 0; i < header_.size(); ++i) {
    double v = NAN;
    for (const auto& [k, x] : row)
      if (k == header_[i]) v = x;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.8g", v);
    csv << (i ? "," : "") << buf;
    jl << (i ? ", " : "") << "\"" << header_[i] << "\": " << (std::isfinite(v) ? buf : "null");
    columns_[header_[i]].push_back(v);
  }
  csv << "\n";
  jl << "}\n";
}

namespace {
std::string fmt(double v) {
  char buf[32];
  if (v != 0 && (std::fabs(v) < 1e-2 || std::fabs(v) >= 1e4)) std::snprintf(buf, sizeof buf, "%.1e", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
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
  save_plot_png(dir + "/loss.png", "loss", {{"train", col("train_loss")}, {"val", col("val_loss")}}, "epoch");
  std::vector<double> ta = col("train_acc"), va = col("val_top1");
  for (double& x : ta) x *= 100;
  for (double& x : va) x *= 100;
  save_plot_png(dir + "/accuracy.png", "accuracy (%)", {{"train", ta}, {"val top-1", va}}, "epoch");
  save_plot_png(dir + "/lr.png", "learning rate (end of epoch)", {{"lr", col("lr")}}, "epoch");
}

void save_plot_png(const std::string& path, const std::string& title,
                   const std::vector<std::pair<std::string, std::vector<double>>>& series, const std::string& xlabel) {
  const int W = 800, H = 500, L = 80, R = 20, T = 50, B = 60;
  cv::Mat img(H, W, CV_8UC3, cv::Scalar(255, 255, 255));
  double lo = INFINITY, hi = -INFINITY;
  size_t n = 0;
  for (const auto& [name, ys] : series) {
    n = std::max(n, ys.size());
    for (double y : ys)
      if (std::isfinite(y)) {
        lo = std::min(lo, y);
        hi = std::max(hi, y);
      }
  }
  if (!std::isfinite(lo)) {
    lo = 0;
    hi = 1;
  }
  if (hi - lo < 1e-12) {
    hi += 0.5 * std::max(1e-3, std::fabs(hi));
    lo -= 0.5 * std::max(1e-3, std::fabs(lo));
  }
  double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;
  auto px = [&](double i) { return L + (n > 1 ? i / (n - 1) : 0.5) * (W - L - R); };
  auto py = [&](double y) { return T + (hi - y) / (hi - lo) * (H - T - B); };
  const auto font = cv::FONT_HERSHEY_SIMPLEX;
  cv::putText(img, title, {L, 30}, font, 0.7, {0, 0, 0}, 1, cv::LINE_AA);
  for (int k = 0; k <= 5; ++k) {  // y grid and labels
    double y = lo + (hi - lo) * k / 5;
    int yy = static_cast<int>(py(y));
    cv::line(img, {L, yy}, {W - R, yy}, {225, 225, 225}, 1);
    cv::putText(img, fmt(y), {5, yy + 5}, font, 0.45, {60, 60, 60}, 1, cv::LINE_AA);
  }
  for (size_t i = 0; i < n; i += std::max<size_t>(1, n / 10)) {  // x ticks: epochs from 1
    int xx = static_cast<int>(px(static_cast<double>(i)));
    cv::line(img, {xx, H - B}, {xx, H - B + 5}, {0, 0, 0}, 1);
    cv::putText(img, std::to_string(i + 1), {xx - 5, H - B + 22}, font, 0.45, {60, 60, 60}, 1, cv::LINE_AA);
  }
  cv::rectangle(img, {L, T}, {W - R, H - B}, {0, 0, 0}, 1);
  cv::putText(img, xlabel, {W / 2 - 20, H - 15}, font, 0.5, {0, 0, 0}, 1, cv::LINE_AA);
  const cv::Scalar colors[] = {{180, 119, 31}, {14, 127, 255}, {44, 160, 44}, {40, 39, 214}, {189, 103, 148}};
  for (size_t s = 0; s < series.size(); ++s) {
    const auto& ys = series[s].second;
    cv::Scalar c = colors[s % 5];
    for (size_t i = 0; i < ys.size(); ++i) {
      if (!std::isfinite(ys[i])) continue;
      cv::Point p(static_cast<int>(px(static_cast<double>(i))), static_cast<int>(py(ys[i])));
      cv::circle(img, p, 3, c, cv::FILLED, cv::LINE_AA);
      if (i > 0 && std::isfinite(ys[i - 1]))
        cv::line(img, {static_cast<int>(px(static_cast<double>(i - 1))), static_cast<int>(py(ys[i - 1]))}, p, c, 2,
                 cv::LINE_AA);
    }
    int ly = T + 20 + 20 * static_cast<int>(s);
    cv::line(img, {W - R - 170, ly - 5}, {W - R - 145, ly - 5}, c, 2);
    cv::putText(img, series[s].first, {W - R - 140, ly}, font, 0.5, {0, 0, 0}, 1, cv::LINE_AA);
  }
  cv::Mat rgb;
  cv::cvtColor(img, rgb, cv::COLOR_BGR2RGB);  // drawn with OpenCV's BGR colours
  write_file(path, encode_png(rgb.data, rgb.rows, rgb.cols, 3, 6, "plot " + path));
}

}  // namespace kiln
