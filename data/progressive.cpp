#include "data/progressive.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/json_util.h"

namespace kiln {

namespace {
const std::vector<std::string> kInterpolations = {"auto", "linear", "area"};
}  // namespace

int64_t ProgressiveResizeOptions::size_at(int64_t epoch, int64_t full) const {
  if (!enabled()) return full;
  const int64_t hi = max_size > 0 ? max_size : full, k = epoch + 1;  // k: the epoch as the log counts it
  if (k <= start_epoch) return min_size;
  if (k >= end_epoch) return hi;
  // min + (hi - min) * (k - start) / (end - start), to the nearest multiple of step, in integers
  // (halves up): exact for any config, where doubles could round a half either way.
  const int64_t num = min_size * (end_epoch - start_epoch) + (hi - min_size) * (k - start_epoch);
  const int64_t den = (end_epoch - start_epoch) * step;
  const int64_t s = (2 * num + den) / (2 * den) * step;
  return std::clamp(s, min_size, hi);
}

void ProgressiveResizeOptions::check_fits(int64_t h, int64_t w, const std::string& path) const {
  if (!enabled()) return;
  KILN_CHECK(h == w, path, ": progressive resizing needs square training images; the train_transforms give ", h, "x",
             w, " (end them with a square crop: random_crop, center_crop or random_resized_crop)");
  const int64_t hi = max_size > 0 ? max_size : w;
  KILN_CHECK(hi <= w, path, ".max_size: ", max_size, " is larger than the ", h, "x", w,
             " images the train_transforms give; accepted: 1 to ", w, " (0 = ", w, ")");
  KILN_CHECK(min_size <= hi, path, ".min_size: ", min_size, " is larger than the final size ", hi,
             "; accepted: 1 to ", hi);
}

ProgressiveResizeOptions ProgressiveResizeOptions::from_json(const Json& j, const std::string& path) {
  ProgressiveResizeOptions o;
  JsonReader r(j, path);
  if (!r.has("min_size")) KILN_FAIL(r.path_of("min_size"), ": required: the side of the first epochs' images");
  if (!r.has("end_epoch"))
    KILN_FAIL(r.path_of("end_epoch"), ": required: the first epoch (counted from 1) that trains at max_size");
  // Sides up to 65536 and epochs up to 100000 (train.epochs' limit): the interpolation's products stay
  // far inside int64.
  o.min_size = r.get("min_size", o.min_size, int64_t{1}, int64_t{65536});
  o.max_size = r.get("max_size", o.max_size, int64_t{0}, int64_t{65536});
  o.start_epoch = r.get("start_epoch", o.start_epoch, int64_t{0}, int64_t{100000});
  o.end_epoch = r.get("end_epoch", o.end_epoch, int64_t{1}, int64_t{100001});
  o.step = r.get("step", o.step, int64_t{1}, int64_t{65536});
  r.read("interpolation", o.interpolation);
  r.finish();
  check_choice(o.interpolation, kInterpolations, r.path_of("interpolation"));
  KILN_CHECK(o.end_epoch > o.start_epoch, r.path_of("end_epoch"), ": must be after start_epoch (", o.start_epoch,
             "), got ", o.end_epoch);
  KILN_CHECK(o.max_size == 0 || o.min_size <= o.max_size, r.path_of("min_size"), ": ", o.min_size,
             " is larger than max_size (", o.max_size, ")");
  return o;
}

Json ProgressiveResizeOptions::to_json() const {
  return Json{{"min_size", min_size}, {"max_size", max_size}, {"start_epoch", start_epoch},
              {"end_epoch", end_epoch}, {"step", step}, {"interpolation", interpolation}};
}

}  // namespace kiln
