// Synthetic images (see synthetic.h): pixel bytes come eight at a time from a counter hash.
#include "data/synthetic.h"

#include <cstring>

#include "core/check.h"
#include "core/rng.h"

namespace kiln {

SyntheticOptions SyntheticOptions::from_json(const Json& j, const std::string& path) {
  SyntheticOptions o;
  JsonReader r(j, path);
  r.read("size", o.size);
  r.read("height", o.height);
  r.read("width", o.width);
  r.read("channels", o.channels);
  r.read("num_classes", o.num_classes);
  r.read("seed", o.seed);
  r.finish();
  KILN_CHECK(o.size > 0, r.path_of("size"), ": must be positive, got ", o.size);
  KILN_CHECK(o.height > 0 && o.width > 0 && o.channels > 0, path, ": height, width and channels must be positive, got ",
             o.height, "x", o.width, "x", o.channels);
  KILN_CHECK(o.num_classes > 0, r.path_of("num_classes"), ": must be positive, got ", o.num_classes);
  return o;
}

Json SyntheticOptions::to_json() const {
  return Json{{"size", size},     {"height", height},           {"width", width},
              {"channels", channels}, {"num_classes", num_classes}, {"seed", seed}};
}

SyntheticDataset::SyntheticDataset(SyntheticOptions options, std::string name)
    : o_(options), name_(std::move(name)) {
  KILN_CHECK(o_.size > 0 && o_.height > 0 && o_.width > 0 && o_.channels > 0 && o_.num_classes > 0, name_,
             ": size, height, width, channels and num_classes must be positive, got ", o_.size, ", ", o_.height, "x",
             o_.width, "x", o_.channels, ", ", o_.num_classes);
}

void SyntheticDataset::get_into(int64_t index, Sample& out) const {
  check_index(index);
  out.image.resize(o_.height, o_.width, o_.channels);
  const uint64_t key = mix64(o_.seed ^ mix64(static_cast<uint64_t>(index)));
  const int64_t n = out.image.numel();
  uint8_t* p = out.image.data();
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t h = mix64(key + static_cast<uint64_t>(i));
    std::memcpy(p + i, &h, static_cast<size_t>(std::min<int64_t>(8, n - i)));
  }
  out.label = static_cast<int64_t>(mix64(key ^ 0x6c6162656cull) % static_cast<uint64_t>(o_.num_classes));
}

}  // namespace kiln
