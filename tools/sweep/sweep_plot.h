// The sweep's plots (docs/sweeps.md), drawn like the run's own (tools/engine/metrics.h: the same axes,
// plot_axis and nice_step, and colours), with what a line plot lacks: a categorical axis with error bars
// (top1.png: each variant's mean with +-1 sample std), and one colour per group of curves (curves.png:
// every seed of a variant in the variant's colour, one legend entry per variant).
// Tests: tests/sweep/summary_test.cpp (the files are written and are PNGs).
#pragma once
#include <string>
#include <vector>

namespace kiln::sweep {

// One point per label: `means[i]` with a bar of +-stds[i] (NaN: no bar; a NaN mean: no point, the label
// stays). Percent axis (0..100, zoomed to the values).
void save_error_bars_png(const std::string& path, const std::string& title, const std::vector<std::string>& labels,
                         const std::vector<double>& means, const std::vector<double>& stds);

struct Curve {
  std::vector<double> x, y;
};
struct CurveGroup {
  std::string name;           // the legend's entry
  std::vector<Curve> curves;  // drawn in the group's colour
};
// Every group's curves on one percent axis; one legend entry a group.
void save_curves_png(const std::string& path, const std::string& title, const std::vector<CurveGroup>& groups,
                     const std::string& xlabel);

}  // namespace kiln::sweep
