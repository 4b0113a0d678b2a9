// Small shared pieces of the Dataset interface (see dataset.h).
#include "data/dataset.h"

#include "core/check.h"

namespace kiln {

std::string ImageShape::str() const {
  auto d = [](int64_t v) { return v > 0 ? std::to_string(v) : std::string("?"); };
  return d(h) + "x" + d(w) + "x" + d(c);
}

const char* split_name(Split s) { return s == Split::train ? "train" : "val"; }

void Dataset::check_index(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), name(), ": sample index ", index, " out of range [0, ", size(), ")");
}

}  // namespace kiln
