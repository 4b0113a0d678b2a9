// Classification reports from a confusion matrix: metrics, tables, CSV/JSON files and the heat map
// (drawn with OpenCV imgproc, encoded with data/image_encode.h). Definitions in report.h.
// Tests: tests/engine/report_test.cpp.
#include "tools/engine/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <opencv2/imgproc.hpp>
#include <sstream>

#include "core/check.h"
#include "data/image_encode.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }  // zero_division=0

double f1_of(double p, double r) { return p + r > 0 ? 2 * p * r / (p + r) : 0.0; }

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// %.6g keeps the CSVs readable and exact enough for any count below 10^6.
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

json metrics_json(const ClassMetrics& m) {
  return json{{"name", m.name},   {"precision", m.precision}, {"recall", m.recall},
              {"f1", m.f1},       {"support", m.support},     {"predicted", m.predicted}};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  KILN_CHECK(f.good(), "cannot write '", path, "'");
}

}  // namespace

ClassificationReport classification_report(const std::vector<std::vector<int64_t>>& confusion,
                                           const std::vector<std::string>& names, size_t top) {
  const size_t k = confusion.size();
  for (size_t i = 0; i < k; ++i) {
    KILN_CHECK(confusion[i].size() == k, "classification report: the confusion matrix must be square (", k, "x", k,
               "), row ", i, " has ", confusion[i].size(), " entries");
    for (size_t j = 0; j < k; ++j)
      KILN_CHECK(confusion[i][j] >= 0, "classification report: confusion[", i, "][", j, "] = ", confusion[i][j],
                 " is negative");
  }
  KILN_CHECK(names.empty() || names.size() == k, "classification report: ", names.size(), " class names for ", k,
             " classes (give one name per class, or none for 0..", k == 0 ? 0 : k - 1, ")");
  ClassificationReport r;
  r.confusion = confusion;
  for (size_t i = 0; i < k; ++i) r.names.push_back(names.empty() ? std::to_string(i) : names[i]);
  int64_t correct = 0;
  for (size_t c = 0; c < k; ++c) {
    ClassMetrics m;
    m.name = r.names[c];
    for (size_t j = 0; j < k; ++j) {
      m.support += confusion[c][j];
      m.predicted += confusion[j][c];
    }
    const double tp = static_cast<double>(confusion[c][c]);
    m.precision = ratio(tp, static_cast<double>(m.predicted));
    m.recall = ratio(tp, static_cast<double>(m.support));
    m.f1 = f1_of(m.precision, m.recall);
    r.total += m.support;
    correct += confusion[c][c];
    r.classes.push_back(m);
  }
  r.accuracy = ratio(static_cast<double>(correct), static_cast<double>(r.total));
  r.macro_avg.name = "macro avg";
  r.weighted_avg.name = "weighted avg";
  r.macro_avg.support = r.weighted_avg.support = r.total;
  r.macro_avg.predicted = r.weighted_avg.predicted = r.total;
  for (const ClassMetrics& m : r.classes) {
    const double n = static_cast<double>(k), w = ratio(static_cast<double>(m.support), static_cast<double>(r.total));
    r.macro_avg.precision += m.precision / n;
    r.macro_avg.recall += m.recall / n;
    r.macro_avg.f1 += m.f1 / n;
    r.weighted_avg.precision += m.precision * w;
    r.weighted_avg.recall += m.recall * w;
    r.weighted_avg.f1 += m.f1 * w;
  }
  std::vector<ConfusedPair> pairs;
  for (size_t i = 0; i < k; ++i)
    for (size_t j = 0; j < k; ++j)
      if (i != j && confusion[i][j] > 0)
        pairs.push_back({static_cast<int64_t>(i), static_cast<int64_t>(j), confusion[i][j],
                         ratio(static_cast<double>(confusion[i][j]), static_cast<double>(r.classes[i].support))});
  // Largest count first; ties: the larger share of its class, then by class index (a stable order).
  std::sort(pairs.begin(), pairs.end(), [](const ConfusedPair& a, const ConfusedPair& b) {
    if (a.count != b.count) return a.count > b.count;
    if (a.share != b.share) return a.share > b.share;
    return std::pair(a.true_class, a.predicted) < std::pair(b.true_class, b.predicted);
  });
  if (pairs.size() > top) pairs.resize(top);
  r.most_confused = std::move(pairs);
  return r;
}

std::string format_report(const ClassificationReport& r, size_t max_rows) {
  size_t w = std::string("weighted avg").size();
  for (const std::string& n : r.names) w = std::max(w, n.size());
  const int W = static_cast<int>(w);
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line, "%*s %9s %9s %9s %9s\n\n", W, "", "precision", "recall", "f1-score", "support");
  o << line;
  auto row = [&](const ClassMetrics& m) {
    std::snprintf(line, sizeof line, "%*s %9.4f %9.4f %9.4f %9lld\n", W, m.name.c_str(), m.precision, m.recall, m.f1,
                  static_cast<long long>(m.support));
    o << line;
  };
  if (r.classes.size() <= max_rows) {
    for (const ClassMetrics& m : r.classes) row(m);
  } else {
    std::vector<const ClassMetrics*> worst;
    for (const ClassMetrics& m : r.classes) worst.push_back(&m);
    // Lowest F1 first; ties by class order (stable), so the table does not depend on the sort.
    std::stable_sort(worst.begin(), worst.end(), [](const ClassMetrics* a, const ClassMetrics* b) { return a->f1 < b->f1; });
    o << "(the " << max_rows << " classes of lowest F1 of " << r.classes.size()
      << ", worst first; every class is in report.csv)\n";
    for (size_t i = 0; i < max_rows; ++i) row(*worst[i]);
  }
  o << "\n";
  std::snprintf(line, sizeof line, "%*s %9s %9s %9.4f %9lld\n", W, "accuracy", "", "", r.accuracy,
                static_cast<long long>(r.total));
  o << line;
  row(r.macro_avg);
  row(r.weighted_avg);
  if (!r.most_confused.empty()) {
    o << "\nmost confused (true -> predicted: count, share of the true class)\n";
    for (const ConfusedPair& p : r.most_confused)
      o << "  " << r.names[p.true_class] << " -> " << r.names[p.predicted] << ": " << p.count << ", "
        << fixed(100 * p.share, 1) << "%\n";
  }
  return o.str();
}

json report_to_json(const ClassificationReport& r) {
  json classes = json::array(), pairs = json::array();
  for (const ClassMetrics& m : r.classes) classes.push_back(metrics_json(m));
  for (const ConfusedPair& p : r.most_confused)
    pairs.push_back(json{{"true", p.true_class},
                         {"true_name", r.names[p.true_class]},
                         {"predicted", p.predicted},
                         {"predicted_name", r.names[p.predicted]},
                         {"count", p.count},
                         {"share", p.share}});
  return json{{"names", r.names},
              {"classes", classes},
              {"accuracy", r.accuracy},
              {"total", r.total},
              {"macro_avg", metrics_json(r.macro_avg)},
              {"weighted_avg", metrics_json(r.weighted_avg)},
              {"confusion", r.confusion},
              {"most_confused", pairs}};
}

namespace {

// The heat map's colours: white (0) to dark blue (1), as matplotlib's Blues.
cv::Scalar blues(double v) {
  v = std::clamp(v, 0.0, 1.0);
  return cv::Scalar(247 + (8 - 247) * v, 251 + (48 - 251) * v, 255 + (107 - 255) * v);
}

// The column names (predicted classes) of a k x k matrix of `out.cell` pixels: a (name_w + 2) x M
// strip (M = k * cell) that reads upwards. Each name is drawn horizontally into an M x (name_w + 2)
// image: a counter-clockwise turn makes row y column y and the right end the top, so a name
// right-aligned at row centre(j) ends next to the matrix under column j (imgproc has no rotated text).
cv::Mat column_labels(const std::vector<std::string>& shown, const HeatMapImage& out, int name_w, double label_scale) {
  const auto font = cv::FONT_HERSHEY_SIMPLEX;
  const int k = static_cast<int>(shown.size()), M = out.cell * k;
  cv::Mat horiz(M, name_w + 2, CV_8UC3, cv::Scalar(255, 255, 255));
  for (int j = 0; j < k; j += out.label_step) {
    cv::Size ts = cv::getTextSize(shown[j], font, label_scale, 1, nullptr);
    const int yc = j * out.cell + out.cell / 2 + ts.height / 2;
    cv::putText(horiz, shown[j], {name_w + 1 - ts.width, yc}, font, label_scale, {0, 0, 0}, 1, cv::LINE_AA);
  }
  cv::Mat strip;
  cv::rotate(horiz, strip, cv::ROTATE_90_COUNTERCLOCKWISE);
  return strip;
}

// The colour bar at (bx, top), `bh` pixels high: 0 at the bottom, 1 at the top.
void draw_colour_bar(cv::Mat& img, int bx, int top, int bh) {
  const auto font = cv::FONT_HERSHEY_SIMPLEX;
  for (int y = 0; y < bh; ++y)
    cv::line(img, {bx, top + y}, {bx + 16, top + y}, blues(1.0 - static_cast<double>(y) / std::max(bh - 1, 1)), 1);
  cv::rectangle(img, cv::Rect(bx, top, 17, bh), {0, 0, 0}, 1);
  cv::putText(img, "1", {bx + 22, top + 10}, font, 0.4, {0, 0, 0}, 1, cv::LINE_AA);
  cv::putText(img, "0", {bx + 22, top + bh}, font, 0.4, {0, 0, 0}, 1, cv::LINE_AA);
}

}  // namespace

HeatMapImage render_confusion(const ClassificationReport& r) {
  const int k = static_cast<int>(r.names.size());
  const auto font = cv::FONT_HERSHEY_SIMPLEX;
  // Cells of 64 px for a few classes down to 4 px for hundreds: the matrix stays within ~800 px.
  HeatMapImage out;
  out.cell = std::clamp(k > 0 ? 800 / k : 64, 4, 64);
  out.cell_text = out.cell >= 36;
  const double label_scale = out.cell >= 20 ? 0.45 : 0.35;
  const int label_h = cv::getTextSize("Ag", font, label_scale, 1, nullptr).height + 6;
  out.label_step = std::max(1, (label_h + out.cell - 1) / out.cell);
  // Names longer than 24 characters are cut in the middle ("n02085620...ihuahua"): the margins stay
  // bounded and names that share a prefix stay apart.
  std::vector<std::string> shown(r.names.size());
  int name_w = 0;
  for (int i = 0; i < k; ++i) {
    const std::string& n = r.names[i];
    shown[i] = n.size() > 24 ? n.substr(0, 10) + "..." + n.substr(n.size() - 11) : n;
    if (i % out.label_step == 0) name_w = std::max(name_w, cv::getTextSize(shown[i], font, label_scale, 1, nullptr).width);
  }
  const int M = out.cell * k;
  const int axis = 24;  // the "true" / "predicted" axis titles
  const int left = 10 + axis + name_w + 8, top = 48, bottom = 8 + name_w + 8 + axis, right = 90;
  out.x0 = left;
  out.y0 = top;
  const char* title = "confusion matrix, row-normalised (share of each true class)";
  const int title_w = cv::getTextSize(title, font, 0.55, 1, nullptr).width;
  out.w = std::max(left + std::max(M, 200) + right, 8 + title_w + 8);
  out.h = top + M + bottom;
  cv::Mat img(static_cast<int>(out.h), static_cast<int>(out.w), CV_8UC3, cv::Scalar(255, 255, 255));  // RGB
  cv::putText(img, title, {std::min(left, static_cast<int>(out.w) - 8 - title_w), 28}, font, 0.55, {0, 0, 0}, 1,
              cv::LINE_AA);
  for (int i = 0; i < k; ++i) {
    const double support = static_cast<double>(r.classes[i].support);
    for (int j = 0; j < k; ++j) {
      const double v = ratio(static_cast<double>(r.confusion[i][j]), support);
      cv::Rect cellr(left + j * out.cell, top + i * out.cell, out.cell, out.cell);
      // A class without samples: its row in light grey (no share to show).
      cv::rectangle(img, cellr, support > 0 ? blues(v) : cv::Scalar(225, 225, 225), cv::FILLED);
      if (out.cell_text && support > 0) {
        std::string t = fixed(v, 2);
        int base = 0;
        cv::Size ts = cv::getTextSize(t, font, 0.4, 1, &base);
        cv::putText(img, t, {cellr.x + (out.cell - ts.width) / 2, cellr.y + (out.cell + ts.height) / 2}, font, 0.4,
                    v > 0.5 ? cv::Scalar(255, 255, 255) : cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
      }
    }
  }
  cv::rectangle(img, cv::Rect(left - 1, top - 1, M + 2, M + 2), {0, 0, 0}, 1);
  // Row names (true classes) right-aligned left of the matrix; column names (predicted) below it,
  // drawn on a strip that is then turned a quarter counter-clockwise (imgproc has no rotated text).
  for (int i = 0; i < k; i += out.label_step) {
    cv::Size ts = cv::getTextSize(shown[i], font, label_scale, 1, nullptr);
    const int yc = top + i * out.cell + std::max(out.cell, 1) / 2 + ts.height / 2;
    cv::putText(img, shown[i], {left - 8 - ts.width, yc}, font, label_scale, {0, 0, 0}, 1, cv::LINE_AA);
  }
  column_labels(shown, out, name_w, label_scale).copyTo(img(cv::Rect(left, top + M + 8, M, name_w + 2)));
  cv::putText(img, "predicted", {left + M / 2 - 35, static_cast<int>(out.h) - 8}, font, 0.5, {0, 0, 0}, 1, cv::LINE_AA);
  {
    cv::Mat t(axis, 60, CV_8UC3, cv::Scalar(255, 255, 255));
    cv::putText(t, "true", {10, axis - 7}, font, 0.5, {0, 0, 0}, 1, cv::LINE_AA);
    cv::Mat tr;
    cv::rotate(t, tr, cv::ROTATE_90_COUNTERCLOCKWISE);  // 60 x axis
    const int y = std::clamp(top + M / 2 - 30, 0, static_cast<int>(out.h) - 60);
    tr.copyTo(img(cv::Rect(8, y, axis, 60)));
  }
  draw_colour_bar(img, left + std::max(M, 200) + 20, top, std::max(M, 100));
  out.rgb.assign(img.data, img.data + img.total() * img.elemSize());
  return out;
}

std::vector<std::string> write_report_files(const ClassificationReport& r, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(!ec, "cannot create the report folder '", dir, "': ", ec.message());
  const std::string d = (fs::path(dir) / "").string();
  std::vector<std::string> paths;

  std::ostringstream rep;
  rep << "class,precision,recall,f1,support\n";
  for (const ClassMetrics& m : r.classes)
    rep << csv_field(m.name) << "," << num(m.precision) << "," << num(m.recall) << "," << num(m.f1) << ","
        << m.support << "\n";
  for (const ClassMetrics* m : {&r.macro_avg, &r.weighted_avg})
    rep << m->name << "," << num(m->precision) << "," << num(m->recall) << "," << num(m->f1) << "," << m->support
        << "\n";
  rep << "accuracy,,," << num(r.accuracy) << "," << r.total << "\n";  // sklearn's table: accuracy in the f1 column
  paths.push_back(d + "report.csv");
  write_text(paths.back(), rep.str());

  std::ostringstream pairs;
  pairs << "true,predicted,count,share\n";
  for (const ConfusedPair& p : r.most_confused)
    pairs << csv_field(r.names[p.true_class]) << "," << csv_field(r.names[p.predicted]) << "," << p.count << ","
          << num(p.share) << "\n";
  paths.push_back(d + "confused_pairs.csv");
  write_text(paths.back(), pairs.str());

  std::ostringstream conf;
  conf << "true\\predicted";
  for (const std::string& n : r.names) conf << "," << csv_field(n);
  conf << "\n";
  for (size_t i = 0; i < r.names.size(); ++i) {
    conf << csv_field(r.names[i]);
    for (int64_t v : r.confusion[i]) conf << "," << v;
    conf << "\n";
  }
  paths.push_back(d + "confusion.csv");
  write_text(paths.back(), conf.str());

  HeatMapImage hm = render_confusion(r);
  paths.push_back(d + "confusion.png");
  write_file(paths.back(), encode_png(hm.rgb.data(), hm.h, hm.w, 3, 3, paths.back()));

  paths.push_back(d + "report.json");
  write_text(paths.back(), report_to_json(r).dump(2) + "\n");
  return paths;
}

}  // namespace kiln
