// Small shared pieces of the Dataset interface (see dataset.h).
#include "data/dataset.h"

#include "core/check.h"

namespace kiln {

std::string ImageShape::str() const {
  auto d = [](int64_t v) { return v > 0 ? std::to_string(v) : std::string("?"); };
  return d(h) + "x" + d(w) + "x" + d(c);
}

const char* split_name(Split s) { return s == Split::train ? "train" : "val"; }

std::vector<std::string> numbered_class_names(int64_t k) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < k; ++i) names.push_back(std::to_string(i));
  return names;
}

std::vector<std::string> Dataset::class_names() const { return numbered_class_names(num_classes()); }

void Dataset::check_index(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), name(), ": sample index ", index, " out of range [0, ", size(), ")");
}

}  // namespace kiln
