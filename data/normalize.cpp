// Normalize (see normalize.h).
#include "data/normalize.h"

#include "core/check.h"

namespace kiln {

NormalizeOptions NormalizeOptions::from_json(const Json& j, const std::string& path) {
  NormalizeOptions o;
  JsonReader r(j, path);
  r.allow("type");
  // A single number reads as a list of one (json_read): listed as such, with the defaults.
  if (KeyRecorder* rec = KeyRecorder::current())
    for (auto [key, def] : {std::pair{"mean", &o.mean}, {"std", &o.std}})
      rec->note({r.path_of(key), "list of numbers or number", Json(*def), true, false, ""});
  r.read("mean", o.mean);
  r.read("std", o.std);
  r.finish();
  KILN_CHECK(!o.mean.empty() && !o.std.empty(), path, ": mean and std need at least one value each");
  KILN_CHECK(o.mean.size() == o.std.size() || o.mean.size() == 1 || o.std.size() == 1, path, ": mean has ",
             o.mean.size(), " values and std ", o.std.size(), "; give one value per channel (or one for all)");
  for (size_t i = 0; i < o.std.size(); ++i)
    KILN_CHECK(o.std[i] != 0.0, json_path(r.path_of("std"), i), ": a standard deviation must be non-zero");
  return o;
}

Json NormalizeOptions::to_json() const { return Json{{"mean", mean}, {"std", std}}; }

Normalize::Normalize(NormalizeOptions o) : o_(std::move(o)) {
  const size_t nm = o_.mean.size(), ns = o_.std.size();
  KILN_CHECK(nm > 0 && ns > 0 && (nm == ns || nm == 1 || ns == 1), "normalize: mean has ", nm, " values and std ", ns,
             "; give one value per channel (or one for all)");
  k_ = static_cast<int64_t>(std::max(nm, ns));
  lut_.resize(static_cast<size_t>(k_ * 256));
  lut16_.resize(lut_.size());
  for (int64_t c = 0; c < k_; ++c) {
    double m = o_.mean[nm == 1 ? 0 : c], s = o_.std[ns == 1 ? 0 : c];
    KILN_CHECK(s != 0.0, "normalize: std[", c, "] is zero");
    for (int v = 0; v < 256; ++v) {
      float f = static_cast<float>((v / 255.0 - m) / s);
      lut_[static_cast<size_t>(c * 256 + v)] = f;
      lut16_[static_cast<size_t>(c * 256 + v)] = float_to_bf16(f);
    }
  }
}

void Normalize::check_channels(int64_t c, const std::string& where) const {
  KILN_CHECK(k_ == 1 || c <= 0 || c == k_, where, ": mean/std have ", k_, " values but the images have ", c,
             " channels");
}

namespace {
template <typename T>
void write_lut(const uint8_t* src, int64_t n, int64_t k, const T* lut, T* dst) {
  if (k == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = lut[src[i]];
    return;
  }
  for (int64_t i = 0; i < n; i += k)
    for (int64_t c = 0; c < k; ++c) dst[i + c] = lut[c * 256 + src[i + c]];
}
}  // namespace

void Normalize::write(const Image& img, void* dst, DType dtype) const {
  check_channels(img.c, "normalize");
  if (dtype == DType::f32) write_lut(img.data(), img.numel(), k_, lut_.data(), static_cast<float*>(dst));
  else if (dtype == DType::bf16) write_lut(img.data(), img.numel(), k_, lut16_.data(), static_cast<uint16_t*>(dst));
  else KILN_FAIL("normalize: output dtype must be f32 or bf16, got ", dtype_name(dtype));
}

}  // namespace kiln
