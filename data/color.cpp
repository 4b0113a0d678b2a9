// ColorJitter (see color.h).
#include "data/color.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace kiln {

namespace {
inline uint8_t blend(float d, float f, float v) {
  const float t = d + f * (v - d);
  return t <= 0.f ? 0 : t >= 255.f ? 255 : static_cast<uint8_t>(t);
}
inline int grey(const uint8_t* p) { return (p[0] * 299 + p[1] * 587 + p[2] * 114 + 500) / 1000; }
}  // namespace

ColorJitterOptions ColorJitterOptions::from_json(const Json& j, const std::string& path) {
  ColorJitterOptions o;
  JsonReader r(j, path);
  r.allow("type");
  r.read("brightness", o.brightness);
  r.read("contrast", o.contrast);
  r.read("saturation", o.saturation);
  r.finish();
  for (auto [k, v] : {std::pair{"brightness", o.brightness}, {"contrast", o.contrast}, {"saturation", o.saturation}})
    KILN_CHECK(v >= 0, r.path_of(k), ": must be >= 0 (the spread of the factor around 1), got ", v);
  return o;
}

Json ColorJitterOptions::to_json() const {
  return Json{{"brightness", brightness}, {"contrast", contrast}, {"saturation", saturation}};
}

ColorJitter::ColorJitter(ColorJitterOptions o) : o_(o) {
  KILN_CHECK(o_.brightness >= 0 && o_.contrast >= 0 && o_.saturation >= 0,
             "color_jitter: brightness, contrast and saturation must be >= 0");
}

Json ColorJitter::to_json() const {
  Json j = o_.to_json();
  j["type"] = type();
  return j;
}

void ColorJitter::adjust(Image& img, double brightness, double contrast, double saturation) {
  const int64_t n = img.h * img.w, c = img.c;
  uint8_t* p = img.data();
  uint8_t lut[256];
  auto apply_lut = [&] {
    for (int64_t i = 0; i < n * c; ++i) p[i] = lut[p[i]];
  };
  if (brightness != 1.0) {
    for (int v = 0; v < 256; ++v) lut[v] = blend(0.f, static_cast<float>(brightness), static_cast<float>(v));
    apply_lut();
  }
  if (contrast != 1.0) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += c == 3 ? grey(p + i * 3) : p[i * c];
    const float mean = static_cast<float>(static_cast<int>(sum / static_cast<double>(std::max<int64_t>(n, 1)) + 0.5));
    for (int v = 0; v < 256; ++v) lut[v] = blend(mean, static_cast<float>(contrast), static_cast<float>(v));
    apply_lut();
  }
  if (saturation != 1.0 && c == 3) {
    const float f = static_cast<float>(saturation);
    for (int64_t i = 0; i < n; ++i) {
      uint8_t* q = p + i * 3;
      const float d = static_cast<float>(grey(q));
      for (int k = 0; k < 3; ++k) q[k] = blend(d, f, q[k]);
    }
  }
}

void ColorJitter::apply(Image& img, SampleRng& rng, Image&) const {
  auto factor = [&](double x) {
    const double u = rng.uniform();  // drawn whether or not the adjustment is on
    const double lo = std::max(0.0, 1.0 - x), hi = 1.0 + x;
    return x > 0 ? lo + (hi - lo) * u : 1.0;
  };
  const double b = factor(o_.brightness), ct = factor(o_.contrast), s = factor(o_.saturation);
  adjust(img, b, ct, s);
}

}  // namespace kiln
