// RandomErasing (see erasing.h).
#include "data/erasing.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"

namespace kiln {

namespace {
void check_pair(const std::array<double, 2>& v, bool at_most_one, const std::string& at) {
  KILN_CHECK(v[0] > 0 && v[0] <= v[1] && (!at_most_one || v[1] <= 1.0), at, ": expected an increasing pair [lo, hi] with ",
             at_most_one ? "0 < lo <= hi <= 1" : "0 < lo <= hi", ", got [", v[0], ", ", v[1], "]");
}
}  // namespace

RandomErasingOptions RandomErasingOptions::from_json(const Json& j, const std::string& path) {
  RandomErasingOptions o;
  JsonReader r(j, path);
  r.allow("type");
  r.read("p", o.p);
  for (auto [key, out] : {std::pair{"scale", &o.scale}, {"ratio", &o.ratio}}) {
    std::vector<double> v = {(*out)[0], (*out)[1]};  // the default, as `kiln config keys` lists it
    if (!r.read(key, v)) continue;
    KILN_CHECK(v.size() == 2, r.path_of(key), ": expected a pair [lo, hi], got ", v.size(), " values");
    *out = {v[0], v[1]};
  }
  if (KeyRecorder* rec = KeyRecorder::current())
    rec->note({r.path_of("value"), "integer or \"random\"", o.value, true, false, "0..255"});
  if (const Json* v = r.find("value")) {
    if (v->is_string()) {
      KILN_CHECK(v->get<std::string>() == "random", r.path_of("value"),
                 ": expected a byte 0..255 or \"random\", got ", v->dump());
      o.random = true;
    } else {
      json_read(*v, r.path_of("value"), o.value);
      KILN_CHECK(o.value >= 0 && o.value <= 255, r.path_of("value"),
                 ": expected a byte 0..255 or \"random\" (kiln erases before normalize), got ", o.value);
    }
  }
  r.finish();
  KILN_CHECK(o.p >= 0.0 && o.p <= 1.0, r.path_of("p"), ": a probability must be in [0, 1], got ", o.p);
  check_pair(o.scale, true, r.path_of("scale"));
  check_pair(o.ratio, false, r.path_of("ratio"));
  return o;
}

Json RandomErasingOptions::to_json() const {
  return Json{{"p", p}, {"scale", scale}, {"ratio", ratio}, {"value", random ? Json("random") : Json(value)}};
}

RandomErasing::RandomErasing(RandomErasingOptions o) : o_(o) {
  KILN_CHECK(o_.p >= 0.0 && o_.p <= 1.0, "random_erasing: p must be in [0, 1], got ", o_.p);
  check_pair(o_.scale, true, "random_erasing.scale");
  check_pair(o_.ratio, false, "random_erasing.ratio");
  KILN_CHECK(o_.value >= 0 && o_.value <= 255, "random_erasing.value: must be 0..255, got ", o_.value);
}

Json RandomErasing::to_json() const {
  Json j = o_.to_json();
  j["type"] = type();
  return j;
}

CropBox RandomErasing::choose(ImageShape in, SampleRng& rng) const {
  if (!(rng.uniform() < o_.p)) return {};
  const double area = static_cast<double>(in.h * in.w);
  const double lr0 = std::log(o_.ratio[0]), lr1 = std::log(o_.ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase = area * (o_.scale[0] + (o_.scale[1] - o_.scale[0]) * rng.uniform());
    const double aspect = std::exp(lr0 + (lr1 - lr0) * rng.uniform());
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(erase * aspect)));  // Python's round
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(erase / aspect)));
    if (!(h < in.h && w < in.w)) continue;
    const int64_t top = rng.uniform_int(in.h - h + 1), left = rng.uniform_int(in.w - w + 1);
    return {top, left, h, w};
  }
  return {};
}

void RandomErasing::apply(Image& img, SampleRng& rng, Image&) const {
  const CropBox b = choose(img.shape(), rng);
  const int64_t c = img.c, n = b.w * c;
  for (int64_t y = b.top; y < b.top + b.h; ++y) {
    uint8_t* row = img.data() + (y * img.w + b.left) * c;
    if (!o_.random) {
      std::memset(row, static_cast<int>(o_.value), static_cast<size_t>(n));
      continue;
    }
    for (int64_t i = 0; i < n; i += 8) {
      const uint64_t r = rng.next_u64();
      std::memcpy(row + i, &r, static_cast<size_t>(std::min<int64_t>(8, n - i)));
    }
  }
}

}  // namespace kiln
