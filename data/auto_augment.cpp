// TrivialAugmentWide, RandAugment and their operations (see auto_augment.h). The arithmetic follows
// torchvision 0.14 (autoaugment.py, functional_pil.py) and Pillow 9 (Geometry.c, Filter.c,
// ImageOps.py, ImageEnhance.py) step by step, so the golden test can ask for equal bytes.
#include "data/auto_augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/check.h"
#include "data/color.h"

namespace kiln {

namespace {

constexpr const char* kOpNames[kNumAugmentOps] = {"Identity",   "ShearX",     "ShearY",     "TranslateX", "TranslateY",
                                                  "Rotate",     "Brightness", "Color",      "Contrast",   "Sharpness",
                                                  "Posterize",  "Solarize",   "AutoContrast", "Equalize"};

// torch.linspace(start, end, steps)[i] in float32 (the scalar path of ATen's CPU kernel).
double linspace_f32(double start, double end, int64_t steps, int64_t i) {
  const float s = static_cast<float>(start), e = static_cast<float>(end);
  const float step = (e - s) / static_cast<float>(steps - 1);
  if (i < steps / 2) return s + step * static_cast<float>(i);
  return e - step * static_cast<float>(steps - i - 1);
}

Json fill_json(const std::vector<int64_t>& fill) {
  if (fill.size() == 1) return Json(fill[0]);
  return Json(fill);
}

// "fill": one byte or a list of bytes (one per channel).
std::vector<int64_t> read_fill(JsonReader& r, std::vector<int64_t> fill) {
  if (KeyRecorder* rec = KeyRecorder::current())
    rec->note({r.path_of("fill"), "integer or list of integers", fill_json(fill), true, false, "bytes 0..255"});
  if (const Json* v = r.find("fill")) {
    const std::string at = r.path_of("fill");
    if (v->is_array()) {
      json_read(*v, at, fill);
      KILN_CHECK(fill.size() == 1 || fill.size() == 3, at,
                 ": expected one byte value or one per channel (1 or 3 values), got ", fill.size(), " values");
    } else {
      int64_t b = 0;
      json_read(*v, at, b);
      fill = {b};
    }
    for (int64_t b : fill)
      KILN_CHECK(b >= 0 && b <= 255, at, ": fill values must be bytes 0..255, got ", v->dump());
  }
  return fill;
}

ImageShape check_shape(const std::string& type, ImageShape in, const std::vector<int64_t>& fill) {
  KILN_CHECK(in.c == 1 || in.c == 3, type, ": works on 1-channel (grey) or 3-channel (RGB) images, got ", in.c,
             " channels");
  KILN_CHECK(fill.size() == 1 || static_cast<int64_t>(fill.size()) == in.c, type, ".fill: ", fill.size(),
             " values for a ", in.c, "-channel image; give one value or one per channel");
  return in;
}

void check_bins(int64_t bins, const std::string& at) {
  KILN_CHECK(bins >= 2, at, ": must be >= 2 (the magnitudes are a linspace over the bins), got ", bins);
}

// PIL's Image.point with a 256-entry table per channel (`lut` holds c tables).
void apply_luts(Image& img, const uint8_t* lut, bool per_channel) {
  const int64_t n = img.h * img.w, c = img.c;
  uint8_t* p = img.data();
  if (!per_channel || c == 1) {
    for (int64_t i = 0; i < n * c; ++i) p[i] = lut[p[i]];
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k) p[i * c + k] = lut[k * 256 + p[i * c + k]];
}

void histograms(const Image& img, int64_t* hist) {  // c x 256
  const int64_t n = img.h * img.w, c = img.c;
  std::fill(hist, hist + c * 256, 0);
  const uint8_t* p = img.data();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k) ++hist[k * 256 + p[i * c + k]];
}

// ImageOps.autocontrast(img) (cutoff 0): each channel stretched from [lo, hi] to [0, 255].
void autocontrast(Image& img) {
  int64_t hist[3 * 256];
  histograms(img, hist);
  uint8_t lut[3 * 256];
  for (int64_t k = 0; k < img.c; ++k) {
    const int64_t* h = hist + k * 256;
    int lo = 0, hi = 255;
    while (lo < 256 && !h[lo]) ++lo;
    while (hi >= 0 && !h[hi]) --hi;
    for (int v = 0; v < 256; ++v) {
      if (hi <= lo) {
        lut[k * 256 + v] = static_cast<uint8_t>(v);
        continue;
      }
      const double scale = 255.0 / (hi - lo), offset = -lo * scale;
      const int ix = static_cast<int>(v * scale + offset);
      lut[k * 256 + v] = static_cast<uint8_t>(std::clamp(ix, 0, 255));
    }
  }
  apply_luts(img, lut, true);
}

// ImageOps.equalize(img): each channel through its cumulative histogram.
void equalize(Image& img) {
  int64_t hist[3 * 256];
  histograms(img, hist);
  uint8_t lut[3 * 256];
  for (int64_t k = 0; k < img.c; ++k) {
    const int64_t* h = hist + k * 256;
    int64_t total = 0, last = 0, nonzero = 0;
    for (int v = 0; v < 256; ++v)
      if (h[v]) {
        total += h[v];
        last = h[v];
        ++nonzero;
      }
    const int64_t step = nonzero <= 1 ? 0 : (total - last) / 255;
    int64_t n = step / 2;
    for (int v = 0; v < 256; ++v) {
      if (!step) {
        lut[k * 256 + v] = static_cast<uint8_t>(v);
        continue;
      }
      lut[k * 256 + v] = static_cast<uint8_t>(std::min<int64_t>(n / step, 255));
      n += h[v];
    }
  }
  apply_luts(img, lut, true);
}

// ImageEnhance.Sharpness: blend with PIL's SMOOTH filter (3x3 kernel 1 1 1 / 1 5 1 / 1 1 1, / 13,
// float sum + 0.5 truncated; the border pixels are copied), out = d + f * (in - d), truncated.
void sharpness(Image& img, double factor, Image& scratch) {
  if (factor == 1.0) return;  // PIL's blend returns the image itself
  const int64_t h = img.h, w = img.w, c = img.c;
  if (h < 3 || w < 3) return;  // the degenerate image is the image: nothing changes
  scratch.resize(h, w, c);
  std::memcpy(scratch.data(), img.data(), static_cast<size_t>(h * w * c));
  const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f, f = static_cast<float>(factor);
  const uint8_t* in = img.data();
  uint8_t* d = scratch.data();
  const int64_t row = w * c;
  for (int64_t y = 1; y < h - 1; ++y)
    for (int64_t x = 1; x < w - 1; ++x)
      for (int64_t k = 0; k < c; ++k) {
        const uint8_t* q = in + y * row + x * c + k;
        // Pillow's order: the row below, the row itself, the row above, each left to right.
        float ss = 0.5f;
        ss += q[row - c] * k1 + q[row] * k1 + q[row + c] * k1;
        ss += q[-c] * k1 + q[0] * k5 + q[c] * k1;
        ss += q[-row - c] * k1 + q[-row] * k1 + q[-row + c] * k1;
        d[y * row + x * c + k] = ss <= 0.f ? 0 : ss >= 255.f ? 255 : static_cast<uint8_t>(ss);
      }
  uint8_t* p = img.data();
  for (int64_t i = 0; i < h * w * c; ++i) {
    const float t = static_cast<float>(d[i]) + f * static_cast<float>(static_cast<int>(p[i]) - d[i]);
    p[i] = t <= 0.f ? 0 : t >= 255.f ? 255 : static_cast<uint8_t>(t);
  }
}

// torchvision's _get_inverse_affine_matrix (the PIL branch: center in pixels, from the top-left).
std::array<double, 6> inverse_affine(double cx, double cy, double angle_deg, double tx, double ty, double shear_x_deg,
                                     double shear_y_deg) {
  const double deg = std::numbers::pi / 180.0;
  const double rot = angle_deg * deg, sx = shear_x_deg * deg, sy = shear_y_deg * deg;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  std::array<double, 6> m = {d, -b, 0.0, -c, a, 0.0};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

double degrees(double rad) { return rad * (180.0 / std::numbers::pi); }  // Python's math.degrees

// Python's round(x, 15) closely enough for cos/sin of an angle (exact zeros stay zeros).
double round15(double x) { return std::nearbyint(x * 1e15) / 1e15; }

// PIL's Image.rotate(angle) without expand, about the centre: its own matrix.
void rotate(const Image& in, double angle, const std::vector<int64_t>& fill, Image& out) {
  angle = std::fmod(angle, 360.0);
  if (angle < 0) angle += 360.0;  // Python's %
  const double w = static_cast<double>(in.w), h = static_cast<double>(in.h);
  const double r = -angle * (std::numbers::pi / 180.0);
  std::array<double, 6> m = {round15(std::cos(r)), round15(std::sin(r)), 0.0, round15(-std::sin(r)),
                             round15(std::cos(r)), 0.0};
  const double cx = w / 2.0, cy = h / 2.0;
  m[2] = m[0] * -cx + m[1] * -cy + m[2] + cx;
  m[5] = m[3] * -cx + m[4] * -cy + m[5] + cy;
  affine_nearest(in, m, fill, out);
}

}  // namespace

const char* augment_op_name(AugmentOp op) { return kOpNames[static_cast<int>(op)]; }

AugmentOp augment_op_from_name(const std::string& name) {
  for (int i = 0; i < kNumAugmentOps; ++i)
    if (name == kOpNames[i]) return static_cast<AugmentOp>(i);
  check_choice(name, std::vector<std::string>(kOpNames, kOpNames + kNumAugmentOps), "augment op");
  KILN_FAIL("unreachable");
}

bool augment_op_signed(AugmentOp op) {
  switch (op) {
    case AugmentOp::shear_x:
    case AugmentOp::shear_y:
    case AugmentOp::translate_x:
    case AugmentOp::translate_y:
    case AugmentOp::rotate:
    case AugmentOp::brightness:
    case AugmentOp::color:
    case AugmentOp::contrast:
    case AugmentOp::sharpness: return true;
    default: return false;
  }
}

double augment_op_magnitude(AugmentSpace space, AugmentOp op, int64_t bins, int64_t bin, int64_t h, int64_t w) {
  KILN_CHECK(bins >= 2 && bin >= 0 && bin < bins, "augment_op_magnitude: bin ", bin, " of ", bins, " bins");
  const bool wide = space == AugmentSpace::trivial_augment_wide;
  auto lin = [&](double end) { return linspace_f32(0.0, end, bins, bin); };
  switch (op) {
    case AugmentOp::shear_x:
    case AugmentOp::shear_y: return lin(wide ? 0.99 : 0.3);
    case AugmentOp::translate_x: return lin(wide ? 32.0 : 150.0 / 331.0 * static_cast<double>(w));
    case AugmentOp::translate_y: return lin(wide ? 32.0 : 150.0 / 331.0 * static_cast<double>(h));
    case AugmentOp::rotate: return lin(wide ? 135.0 : 30.0);
    case AugmentOp::brightness:
    case AugmentOp::color:
    case AugmentOp::contrast:
    case AugmentOp::sharpness: return lin(wide ? 0.99 : 0.9);
    case AugmentOp::posterize: {
      // 8 - (arange(bins) / ((bins - 1) / k)).round().int(), in float32, rounding half to even
      const float div = static_cast<float>((static_cast<double>(bins) - 1.0) / (wide ? 6.0 : 4.0));
      return 8.0 - std::nearbyint(static_cast<float>(bin) / div);
    }
    case AugmentOp::solarize: return linspace_f32(255.0, 0.0, bins, bin);
    default: return 0.0;
  }
}

void affine_nearest(const Image& in, const std::array<double, 6>& a, const std::vector<int64_t>& fill, Image& out) {
  const int64_t h = in.h, w = in.w, c = in.c;
  KILN_CHECK(fill.size() == 1 || static_cast<int64_t>(fill.size()) == c, "affine_nearest: ", fill.size(),
             " fill values for ", c, " channels");
  out.resize(h, w, c);
  uint8_t fillc[4] = {0, 0, 0, 0};
  for (int64_t k = 0; k < c; ++k) fillc[k] = static_cast<uint8_t>(fill.size() == 1 ? fill[0] : fill[k]);
  const uint8_t* src = in.data();
  uint8_t* dst = out.data();
  auto put = [&](int64_t o, int64_t xin, int64_t yin) {
    if (xin >= 0 && xin < w && yin >= 0 && yin < h) {
      const uint8_t* s = src + (yin * w + xin) * c;
      for (int64_t k = 0; k < c; ++k) dst[o + k] = s[k];
    } else {
      for (int64_t k = 0; k < c; ++k) dst[o + k] = fillc[k];
    }
  };
  auto coord = [](double v) -> int64_t { return v < 0.0 ? -1 : static_cast<int64_t>(v); };  // PIL's COORD
  if (a[1] == 0 && a[3] == 0) {  // PIL's ImagingScaleAffine (translations)
    double yo = a[5] + a[4] * 0.5;
    for (int64_t y = 0; y < h; ++y, yo += a[4]) {
      double xo = a[2] + a[0] * 0.5;
      const int64_t yin = coord(yo);
      for (int64_t x = 0; x < w; ++x, xo += a[0]) put((y * w + x) * c, coord(xo), yin);
    }
    return;
  }
  const double xo = a[2] + a[1] * 0.5 + a[0] * 0.5, yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
  auto fits = [&](double x, double y) {  // PIL's check_fixed
    return std::fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && std::fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
  };
  const double W = static_cast<double>(w), H = static_cast<double>(h);
  if (fits(0, 0) && fits(W, H) && fits(0, H) && fits(W, 0)) {  // PIL's affine_fixed: 16.16 stepping
    auto fix = [](double v) { return static_cast<int64_t>(std::floor(v * 65536.0 + 0.5)); };
    const int64_t a0 = fix(a[0]), a1 = fix(a[1]), a3 = fix(a[3]), a4 = fix(a[4]);
    int64_t ro = fix(xo), so = fix(yo);
    for (int64_t y = 0; y < h; ++y, ro += a1, so += a4) {
      int32_t xx = static_cast<int32_t>(ro), yy = static_cast<int32_t>(so);
      for (int64_t x = 0; x < w; ++x, xx += static_cast<int32_t>(a0), yy += static_cast<int32_t>(a3))
        put((y * w + x) * c, xx >> 16, yy >> 16);
    }
    return;
  }
  double rx = xo, ry = yo;
  for (int64_t y = 0; y < h; ++y, rx += a[1], ry += a[4]) {
    double xx = rx, yy = ry;
    for (int64_t x = 0; x < w; ++x, xx += a[0], yy += a[3]) put((y * w + x) * c, coord(xx), coord(yy));
  }
}

void apply_augment_op(Image& img, AugmentOp op, double m, const std::vector<int64_t>& fill, Image& scratch) {
  switch (op) {
    case AugmentOp::identity: return;
    case AugmentOp::shear_x:
    case AugmentOp::shear_y: {
      // torchvision passes shear = degrees(atan(m)) and converts it back to radians
      const double s = degrees(std::atan(m));
      const bool x = op == AugmentOp::shear_x;
      affine_nearest(img, inverse_affine(0, 0, 0, 0, 0, x ? s : 0.0, x ? 0.0 : s), fill, scratch);
      std::swap(img, scratch);
      return;
    }
    case AugmentOp::translate_x:
    case AugmentOp::translate_y: {
      const double t = static_cast<double>(static_cast<int64_t>(m));  // int(magnitude)
      const bool x = op == AugmentOp::translate_x;
      affine_nearest(img, inverse_affine(img.w * 0.5, img.h * 0.5, 0, x ? t : 0, x ? 0 : t, 0, 0), fill, scratch);
      std::swap(img, scratch);
      return;
    }
    case AugmentOp::rotate:
      if (std::fmod(m, 360.0) == 0.0) return;  // PIL returns a copy
      rotate(img, m, fill, scratch);
      std::swap(img, scratch);
      return;
    case AugmentOp::brightness: ColorJitter::adjust(img, 1.0 + m, 1.0, 1.0); return;
    case AugmentOp::color: ColorJitter::adjust(img, 1.0, 1.0, 1.0 + m); return;
    case AugmentOp::contrast: ColorJitter::adjust(img, 1.0, 1.0 + m, 1.0); return;
    case AugmentOp::sharpness: sharpness(img, 1.0 + m, scratch); return;
    case AugmentOp::posterize: {
      const int bits = static_cast<int>(m);
      KILN_CHECK(bits >= 0 && bits <= 8, "Posterize: bits must be 0..8, got ", m);
      const int mask = ~((1 << (8 - bits)) - 1);
      uint8_t lut[256];
      for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v & mask);
      apply_luts(img, lut, false);
      return;
    }
    case AugmentOp::solarize: {
      uint8_t lut[256];
      for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v < m ? v : 255 - v);
      apply_luts(img, lut, false);
      return;
    }
    case AugmentOp::autocontrast: autocontrast(img); return;
    case AugmentOp::equalize: equalize(img); return;
  }
}

// --- options --------------------------------------------------------------------------------------

TrivialAugmentWideOptions TrivialAugmentWideOptions::from_json(const Json& j, const std::string& path) {
  TrivialAugmentWideOptions o;
  JsonReader r(j, path);
  r.allow("type");
  r.read("num_magnitude_bins", o.num_magnitude_bins);
  o.fill = read_fill(r, o.fill);
  r.finish();
  check_bins(o.num_magnitude_bins, r.path_of("num_magnitude_bins"));
  return o;
}

Json TrivialAugmentWideOptions::to_json() const {
  return Json{{"num_magnitude_bins", num_magnitude_bins}, {"fill", fill_json(fill)}};
}

RandAugmentOptions RandAugmentOptions::from_json(const Json& j, const std::string& path) {
  RandAugmentOptions o;
  JsonReader r(j, path);
  r.allow("type");
  r.read("num_ops", o.num_ops);
  r.read("magnitude", o.magnitude);
  r.read("num_magnitude_bins", o.num_magnitude_bins);
  o.fill = read_fill(r, o.fill);
  r.finish();
  KILN_CHECK(o.num_ops >= 0, r.path_of("num_ops"), ": must be >= 0, got ", o.num_ops);
  check_bins(o.num_magnitude_bins, r.path_of("num_magnitude_bins"));
  KILN_CHECK(o.magnitude >= 0 && o.magnitude < o.num_magnitude_bins, r.path_of("magnitude"),
             ": must be a bin in [0, num_magnitude_bins - 1] = [0, ", o.num_magnitude_bins - 1, "], got ",
             o.magnitude);
  return o;
}

Json RandAugmentOptions::to_json() const {
  return Json{{"num_ops", num_ops},
              {"magnitude", magnitude},
              {"num_magnitude_bins", num_magnitude_bins},
              {"fill", fill_json(fill)}};
}

// --- TrivialAugmentWide ------------------------------------------------------------------------------

TrivialAugmentWide::TrivialAugmentWide(TrivialAugmentWideOptions o) : o_(std::move(o)) {
  check_bins(o_.num_magnitude_bins, "trivial_augment_wide.num_magnitude_bins");
  KILN_CHECK(!o_.fill.empty() && o_.fill.size() <= 3, "trivial_augment_wide.fill: 1 or 3 values");
}

Json TrivialAugmentWide::to_json() const {
  Json j = o_.to_json();
  j["type"] = type();
  return j;
}

ImageShape TrivialAugmentWide::output_shape(ImageShape in) const { return check_shape(type(), in, o_.fill); }

AugmentChoice TrivialAugmentWide::choose(ImageShape in, SampleRng& rng) const {
  const auto op = static_cast<AugmentOp>(rng.uniform_int(kNumAugmentOps));
  const int64_t bin = rng.uniform_int(o_.num_magnitude_bins);
  const bool negate = rng.uniform() < 0.5;
  double m = augment_op_magnitude(AugmentSpace::trivial_augment_wide, op, o_.num_magnitude_bins, bin, in.h, in.w);
  if (augment_op_signed(op) && negate) m = -m;
  return {op, m};
}

void TrivialAugmentWide::apply(Image& img, SampleRng& rng, Image& scratch) const {
  check_shape(type(), img.shape(), o_.fill);
  const AugmentChoice ch = choose(img.shape(), rng);
  apply_augment_op(img, ch.op, ch.magnitude, o_.fill, scratch);
}

// --- RandAugment ---------------------------------------------------------------------------------------

RandAugment::RandAugment(RandAugmentOptions o) : o_(std::move(o)) {
  check_bins(o_.num_magnitude_bins, "rand_augment.num_magnitude_bins");
  KILN_CHECK(o_.num_ops >= 0 && o_.magnitude >= 0 && o_.magnitude < o_.num_magnitude_bins,
             "rand_augment: num_ops must be >= 0 and magnitude in [0, num_magnitude_bins - 1]; got num_ops ",
             o_.num_ops, ", magnitude ", o_.magnitude);
  KILN_CHECK(!o_.fill.empty() && o_.fill.size() <= 3, "rand_augment.fill: 1 or 3 values");
}

Json RandAugment::to_json() const {
  Json j = o_.to_json();
  j["type"] = type();
  return j;
}

ImageShape RandAugment::output_shape(ImageShape in) const { return check_shape(type(), in, o_.fill); }

AugmentChoice RandAugment::draw(ImageShape in, SampleRng& rng) const {
  const auto op = static_cast<AugmentOp>(rng.uniform_int(kNumAugmentOps));
  const bool negate = rng.uniform() < 0.5;
  const double m =
      augment_op_magnitude(AugmentSpace::rand_augment, op, o_.num_magnitude_bins, o_.magnitude, in.h, in.w);
  return {op, augment_op_signed(op) && negate ? -m : m};
}

std::vector<AugmentChoice> RandAugment::choose(ImageShape in, SampleRng& rng) const {
  std::vector<AugmentChoice> out;
  for (int64_t i = 0; i < o_.num_ops; ++i) out.push_back(draw(in, rng));
  return out;
}

void RandAugment::apply(Image& img, SampleRng& rng, Image& scratch) const {
  check_shape(type(), img.shape(), o_.fill);
  for (int64_t i = 0; i < o_.num_ops; ++i) {  // as choose(), without the vector
    const AugmentChoice ch = draw(img.shape(), rng);
    apply_augment_op(img, ch.op, ch.magnitude, o_.fill, scratch);
  }
}

}  // namespace kiln
