// The sweep's plots (sweep_plot.h): an 800x500 canvas as the run's plots (tools/engine/metrics.cpp), the y
// axis zoomed to the values (round ticks from nice_step) so that differences of a few tenths show.
#include "tools/sweep/sweep_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <opencv2/imgproc.hpp>

#include "data/image_encode.h"
#include "tools/engine/metrics.h"  // nice_step, write_file_atomically

namespace kiln::sweep {

namespace {

constexpr int W = 800, H = 500, L = 70, R = 20, T = 50, B = 90;
const cv::Scalar kColors[] = {{180, 119, 31}, {14, 127, 255}, {44, 160, 44}, {40, 39, 214}, {189, 103, 148},
                              {75, 86, 140},  {194, 119, 227}, {127, 127, 127}, {34, 189, 188}, {207, 190, 23}};

// A y axis over `values` (NaNs ignored) within 0..100: round ticks, a little room above and below.
struct YAxis {
  double lo = 0, hi = 100, step = 20;
  double py(double y) const { return T + (hi - y) / (hi - lo) * (H - T - B); }
};
YAxis percent_axis(const std::vector<double>& values) {
  double lo = INFINITY, hi = -INFINITY;
  for (double v : values)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  YAxis a;
  if (!std::isfinite(lo)) return a;
  const double span = std::max(hi - lo, 0.5);
  a.step = nice_step(span / 5);
  a.lo = std::max(0.0, std::floor((lo - 0.1 * span) / a.step) * a.step);
  a.hi = std::min(100.0, std::ceil((hi + 0.1 * span) / a.step) * a.step);
  if (a.hi <= a.lo) a.hi = a.lo + a.step;
  return a;
}

cv::Mat canvas(const std::string& title, const YAxis& ax, const std::string& xlabel) {
  cv::Mat img(H, W, CV_8UC3, cv::Scalar(255, 255, 255));
  const auto font = cv::FONT_HERSHEY_SIMPLEX;
  cv::putText(img, title, {L, 30}, font, 0.6, {0, 0, 0}, 1, cv::LINE_AA);
  for (double y = ax.lo; y <= ax.hi + ax.step * 1e-6; y += ax.step) {
    const int yy = static_cast<int>(ax.py(y));
    cv::line(img, {L, yy}, {W - R, yy}, {225, 225, 225}, 1);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", std::round(y * 1000) / 1000);
    cv::putText(img, buf, {5, yy + 5}, font, 0.45, {60, 60, 60}, 1, cv::LINE_AA);
  }
  cv::rectangle(img, {L, T}, {W - R, H - B}, {0, 0, 0}, 1);
  cv::putText(img, xlabel, {W / 2 - 20, H - 15}, font, 0.5, {0, 0, 0}, 1, cv::LINE_AA);
  return img;
}

void save(const cv::Mat& img, const std::string& path) {
  cv::Mat rgb;
  cv::cvtColor(img, rgb, cv::COLOR_BGR2RGB);  // drawn with OpenCV's BGR colours
  const std::vector<uint8_t> png = encode_png(rgb.data, rgb.rows, rgb.cols, 3, 6, "plot " + path);
  write_file_atomically(path, std::string(png.begin(), png.end()));
}

}  // namespace

void save_error_bars_png(const std::string& path, const std::string& title, const std::vector<std::string>& labels,
                         const std::vector<double>& means, const std::vector<double>& stds) {
  std::vector<double> ends;
  for (size_t i = 0; i < means.size(); ++i) {
    const double sd = i < stds.size() && std::isfinite(stds[i]) ? stds[i] : 0;
    ends.push_back(means[i] - sd);
    ends.push_back(means[i] + sd);
  }
  const YAxis ax = percent_axis(ends);
  cv::Mat img = canvas(title, ax, "variant");
  const size_t n = std::max<size_t>(labels.size(), 1);
  const double slot = static_cast<double>(W - L - R) / static_cast<double>(n);
  for (size_t i = 0; i < labels.size(); ++i) {
    const int x = static_cast<int>(L + slot * (static_cast<double>(i) + 0.5));
    const cv::Scalar c = kColors[i % 10];
    // The label under the axis, cut to its slot (about 7 px a character).
    const size_t fit = static_cast<size_t>(std::max(3.0, slot / 7));
    const std::string label = labels[i].size() > fit ? labels[i].substr(0, fit - 1) + "~" : labels[i];
    cv::putText(img, label, {x - 3 * static_cast<int>(label.size()), H - B + 20}, cv::FONT_HERSHEY_SIMPLEX, 0.42,
                {0, 0, 0}, 1, cv::LINE_AA);
    if (i >= means.size() || !std::isfinite(means[i])) continue;
    const int y = static_cast<int>(ax.py(means[i]));
    if (i < stds.size() && std::isfinite(stds[i])) {
      const int y0 = static_cast<int>(ax.py(means[i] - stds[i])), y1 = static_cast<int>(ax.py(means[i] + stds[i]));
      cv::line(img, {x, y0}, {x, y1}, c, 2, cv::LINE_AA);
      cv::line(img, {x - 8, y0}, {x + 8, y0}, c, 2, cv::LINE_AA);
      cv::line(img, {x - 8, y1}, {x + 8, y1}, c, 2, cv::LINE_AA);
    }
    cv::circle(img, {x, y}, 5, c, cv::FILLED, cv::LINE_AA);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", means[i]);
    cv::putText(img, buf, {x + 10, y - 6}, cv::FONT_HERSHEY_SIMPLEX, 0.42, {60, 60, 60}, 1, cv::LINE_AA);
  }
  save(img, path);
}

void save_curves_png(const std::string& path, const std::string& title, const std::vector<CurveGroup>& groups,
                     const std::string& xlabel) {
  std::vector<double> ys;
  double x0 = INFINITY, x1 = -INFINITY;
  for (const CurveGroup& g : groups)
    for (const Curve& c : g.curves)
      for (size_t i = 0; i < c.x.size() && i < c.y.size(); ++i)
        if (std::isfinite(c.x[i]) && std::isfinite(c.y[i])) {
          ys.push_back(c.y[i]);
          x0 = std::min(x0, c.x[i]), x1 = std::max(x1, c.x[i]);
        }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1;
  if (x1 - x0 < 1e-12) x0 -= 0.5, x1 += 0.5;
  const YAxis ax = percent_axis(ys);
  cv::Mat img = canvas(title, ax, xlabel);
  auto px = [&](double x) { return static_cast<int>(L + (x - x0) / (x1 - x0) * (W - L - R)); };
  const double stepx = std::max(std::round(nice_step((x1 - x0) / 8)), 1.0);
  for (double x = std::ceil(x0 / stepx) * stepx; x <= x1 + 1e-9; x += stepx) {
    cv::line(img, {px(x), H - B}, {px(x), H - B + 5}, {0, 0, 0}, 1);
    cv::putText(img, std::to_string(static_cast<long long>(x)), {px(x) - 4, H - B + 20}, cv::FONT_HERSHEY_SIMPLEX, 0.45,
                {60, 60, 60}, 1, cv::LINE_AA);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const cv::Scalar c = kColors[g % 10];
    for (const Curve& cv_ : groups[g].curves) {
      cv::Point prev;
      bool has_prev = false;
      for (size_t i = 0; i < cv_.x.size() && i < cv_.y.size(); ++i) {
        if (!std::isfinite(cv_.x[i]) || !std::isfinite(cv_.y[i])) {
          has_prev = false;
          continue;
        }
        const cv::Point p(px(cv_.x[i]), static_cast<int>(ax.py(cv_.y[i])));
        cv::circle(img, p, 2, c, cv::FILLED, cv::LINE_AA);
        if (has_prev) cv::line(img, prev, p, c, 1, cv::LINE_AA);
        prev = p, has_prev = true;
      }
    }
    // The legend: one entry a group, in the bottom-right corner (accuracy curves rise towards the top right).
    const int ly = H - B - 10 - 18 * static_cast<int>(groups.size() - g) + 12;
    cv::line(img, {W - R - 200, ly - 5}, {W - R - 175, ly - 5}, c, 2);
    cv::putText(img, groups[g].name, {W - R - 170, ly}, cv::FONT_HERSHEY_SIMPLEX, 0.45, {0, 0, 0}, 1, cv::LINE_AA);
  }
  save(img, path);
}

}  // namespace kiln::sweep
