// Class weights: the option's checks, counting a training split's labels, "balanced". See
// class_weights.h. Tests: tests/engine/class_weights_test.cpp.
#include "tools/engine/class_weights.h"

#include <cmath>

#include "core/check.h"
#include "data/image_folder.h"

namespace kiln {

std::vector<int64_t> class_counts(const Dataset& d) {
  std::vector<int64_t> counts(static_cast<size_t>(d.num_classes()), 0);
  auto add = [&](int64_t label, int64_t i) {
    KILN_CHECK(label >= 0 && label < d.num_classes(), d.name(), ": sample ", i, " has label ", label,
               " outside [0, ", d.num_classes(), ")");
    ++counts[static_cast<size_t>(label)];
  };
  if (const auto* files = dynamic_cast<const ImageFileDataset*>(&d)) {
    for (int64_t i = 0; i < d.size(); ++i) add(files->entry(i).label, i);  // the labels, no image read
    return counts;
  }
  Sample s;
  for (int64_t i = 0; i < d.size(); ++i) {
    d.get_into(i, s);
    add(s.label, i);
  }
  return counts;
}

std::vector<double> balanced_class_weights(const std::vector<int64_t>& counts) {
  double n = 0;
  for (int64_t c : counts) n += static_cast<double>(c);
  std::vector<double> w(counts.size(), 0.0);
  for (size_t c = 0; c < counts.size(); ++c)
    if (counts[c] > 0) w[c] = n / (static_cast<double>(counts.size()) * static_cast<double>(counts[c]));
  return w;
}

std::vector<double> resolve_class_weights(const json& option, const Dataset& train, const std::string& path) {
  check_class_weights_option(option, path);
  if (option.is_null()) return {};
  if (option.is_string()) return balanced_class_weights(class_counts(train));
  KILN_CHECK(static_cast<int64_t>(option.size()) == train.num_classes(), path, " lists ", option.size(),
             " weights, but ", train.name(), " has ", train.num_classes(), " classes; give one weight per class or \"balanced\"");
  std::vector<double> w;
  for (const json& v : option) w.push_back(v.get<double>());
  return w;
}

}  // namespace kiln
