// Evaluation reports of a classifier from its confusion matrix ([true][predicted] counts, as
// EvalResult holds): per-class precision, recall, F1 and support with macro and weighted averages
// and accuracy (sklearn's classification_report with labels=range(K), zero_division=0), the
// most-confused pairs, and the files `kiln eval` and the end of training write:
//   report.csv          class,precision,recall,f1,support; then the rows macro avg, weighted avg, accuracy
//   confused_pairs.csv  true,predicted,count,share (share of the true class), most confused first
//   confusion.csv       the counts, class names as the header row and the first column
//   confusion.png       the row-normalised matrix as a heat map, class names on both axes
//   report.json         all of the above
// Every class counts in the macro average, also one with no samples and no predictions (its
// precision, recall and F1 are 0), as sklearn does when given the labels. Docs: docs/reports.md.
// Tests: tests/engine/report_test.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_reader.h"

namespace kiln {

struct ClassMetrics {
  std::string name;
  double precision = 0, recall = 0, f1 = 0;
  int64_t support = 0;    // samples of this class (its row sum); for an average: all samples
  int64_t predicted = 0;  // samples predicted as this class (its column sum)
};

struct ConfusedPair {
  int64_t true_class = 0, predicted = 0;
  int64_t count = 0;
  double share = 0;  // count / the true class's support
};

struct ClassificationReport {
  std::vector<std::string> names;               // one per class
  std::vector<std::vector<int64_t>> confusion;  // [true][predicted]
  std::vector<ClassMetrics> classes;
  ClassMetrics macro_avg, weighted_avg;  // named "macro avg", "weighted avg"
  double accuracy = 0;                   // trace / total (0 for an empty matrix)
  int64_t total = 0;
  std::vector<ConfusedPair> most_confused;  // off-diagonal cells with a count, largest first
};

// `names`: one per class, or empty for "0".."K-1". `top`: how many confused pairs to keep.
// Throws for a matrix that is not square, a negative count, or names of another length.
ClassificationReport classification_report(const std::vector<std::vector<int64_t>>& confusion,
                                           const std::vector<std::string>& names = {}, size_t top = 10);

// The printed table (as sklearn prints it) and the most-confused pairs. With more than `max_rows`
// classes (an ImageNet run has 1000) only the `max_rows` of lowest F1 are printed, worst first, under a
// line that says so; the files (write_report_files) always hold every class.
std::string format_report(const ClassificationReport& r, size_t max_rows = 30);

json report_to_json(const ClassificationReport& r);

// The row-normalised heat map, RGB: the matrix's cells start at (x0, y0) and are `cell` pixels wide.
// With cells too small for text (many classes) the values are left out and the names thinned to one
// every `label_step` classes.
struct HeatMapImage {
  int64_t h = 0, w = 0;
  int x0 = 0, y0 = 0, cell = 0, label_step = 1;
  bool cell_text = false;
  std::vector<uint8_t> rgb;  // h x w x 3
};
HeatMapImage render_confusion(const ClassificationReport& r);

// Writes the five files above into `dir` (created if missing); returns their paths.
std::vector<std::string> write_report_files(const ClassificationReport& r, const std::string& dir);

}  // namespace kiln
