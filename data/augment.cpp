// RandomCrop and HorizontalFlip (see augment.h).
#include "data/augment.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>
#include <opencv2/core.hpp>

#include "core/check.h"

namespace kiln {

// --- RandomCrop ---------------------------------------------------------------------------------

RandomCropOptions RandomCropOptions::from_json(const Json& j, const std::string& path) {
  RandomCropOptions o;
  JsonReader r(j, path);
  r.allow("type");
  r.require("size", o.size);
  r.read("padding", o.padding);
  r.read("padding_mode", o.padding_mode);
  r.read("fill", o.fill);
  r.finish();
  KILN_CHECK(o.size > 0, r.path_of("size"), ": must be positive, got ", o.size);
  KILN_CHECK(o.padding >= 0, r.path_of("padding"), ": must be >= 0, got ", o.padding);
  check_choice(o.padding_mode, {"constant", "edge", "reflect"}, r.path_of("padding_mode"));
  KILN_CHECK(o.fill >= 0 && o.fill <= 255, r.path_of("fill"), ": must be a byte value 0..255, got ", o.fill);
  return o;
}

Json RandomCropOptions::to_json() const {
  return Json{{"size", size}, {"padding", padding}, {"padding_mode", padding_mode}, {"fill", fill}};
}

RandomCrop::RandomCrop(RandomCropOptions o) : o_(std::move(o)) {
  KILN_CHECK(o_.size > 0 && o_.padding >= 0 && o_.fill >= 0 && o_.fill <= 255,
             "random_crop: size must be > 0, padding >= 0, fill 0..255; got size ", o_.size, ", padding ", o_.padding,
             ", fill ", o_.fill);
  if (o_.padding_mode == "constant") border_ = cv::BORDER_CONSTANT;
  else if (o_.padding_mode == "edge") border_ = cv::BORDER_REPLICATE;
  else if (o_.padding_mode == "reflect") border_ = cv::BORDER_REFLECT_101;  // torchvision's "reflect"
  else check_choice(o_.padding_mode, {"constant", "edge", "reflect"}, "random_crop.padding_mode");
}

Json RandomCrop::to_json() const {
  Json j = o_.to_json();
  j["type"] = type();
  return j;
}

ImageShape RandomCrop::output_shape(ImageShape in) const {
  const double s = static_cast<double>(o_.size);
  checked_output_size(type(), in, s, s);
  if (in.h > 0) {
    // In double: a padding near 2^62 must not wrap. The padded image is never allocated (crop()
    // maps columns), but its coordinates go through OpenCV's int borderInterpolate.
    const double ph = static_cast<double>(in.h) + 2.0 * static_cast<double>(o_.padding);
    const double pw = static_cast<double>(in.w) + 2.0 * static_cast<double>(o_.padding);
    KILN_CHECK(ph >= s && pw >= s, "random_crop: a ", o_.size, "x", o_.size, " crop does not fit in a ", in.str(),
               " image padded by ", o_.padding);
    KILN_CHECK(ph <= INT_MAX && pw <= INT_MAX, "random_crop: a ", in.str(), " image padded by ", o_.padding,
               " has a side over OpenCV's limit of ", INT_MAX, " pixels");
  }
  return {o_.size, o_.size, in.c};
}

RandomCrop::Box RandomCrop::choose(ImageShape in, SampleRng& rng) const {
  output_shape(in);
  Box b;
  b.top = rng.uniform_int(in.h + 2 * o_.padding - o_.size + 1);
  b.left = rng.uniform_int(in.w + 2 * o_.padding - o_.size + 1);
  return b;
}

void RandomCrop::crop(const Image& in, Box box, Image& out) const {
  const int64_t s = o_.size, c = in.c, p = o_.padding;
  KILN_CHECK(box.top >= 0 && box.left >= 0 && box.top + s <= in.h + 2 * p && box.left + s <= in.w + 2 * p,
             "random_crop: box at (", box.top, ", ", box.left, ") of size ", s, " is outside the ", in.shape().str(),
             " image padded by ", p);
  out.resize(s, s, c);
  // Source column of every output column (-1: constant fill), merged into runs of consecutive
  // columns, so each row is a few memcpy calls however the border is filled.
  struct Run {
    int64_t x, src, len;  // src = -1: fill
  };
  thread_local std::vector<Run> runs;  // per thread: no allocation once warmed up
  runs.clear();
  for (int64_t x = 0; x < s; ++x) {
    int64_t src = cv::borderInterpolate(static_cast<int>(box.left + x - p), static_cast<int>(in.w), border_);
    if (!runs.empty()) {
      Run& last = runs.back();
      if ((src < 0 && last.src < 0) || (src >= 0 && last.src >= 0 && src == last.src + last.len)) {
        ++last.len;
        continue;
      }
    }
    runs.push_back({x, src, 1});
  }
  const uint8_t fill = static_cast<uint8_t>(o_.fill);
  for (int64_t y = 0; y < s; ++y) {
    uint8_t* dst = out.data() + y * s * c;
    int64_t sy = cv::borderInterpolate(static_cast<int>(box.top + y - p), static_cast<int>(in.h), border_);
    if (sy < 0) {
      std::memset(dst, fill, static_cast<size_t>(s * c));
      continue;
    }
    const uint8_t* src = in.data() + sy * in.w * c;
    for (const Run& r : runs) {
      if (r.src < 0) std::memset(dst + r.x * c, fill, static_cast<size_t>(r.len * c));
      else std::memcpy(dst + r.x * c, src + r.src * c, static_cast<size_t>(r.len * c));
    }
  }
}

void RandomCrop::apply(Image& img, SampleRng& rng, Image& scratch) const {
  Box b = choose(img.shape(), rng);
  crop(img, b, scratch);
  std::swap(img, scratch);
}

// --- HorizontalFlip ------------------------------------------------------------------------------

HorizontalFlipOptions HorizontalFlipOptions::from_json(const Json& j, const std::string& path) {
  HorizontalFlipOptions o;
  JsonReader r(j, path);
  r.allow("type");
  r.read("p", o.p);
  r.read("mode", o.mode);
  r.finish();
  KILN_CHECK(o.p >= 0.0 && o.p <= 1.0, r.path_of("p"), ": a probability must be in [0, 1], got ", o.p);
  KILN_CHECK(o.mode == "random" || o.mode == "alternate", r.path_of("mode"), " = \"", o.mode,
             "\" is not accepted; accepted: \"random\" (a new draw each epoch) or \"alternate\" (each image "
             "mirrored in every other epoch)");
  KILN_CHECK(o.mode != "alternate" || o.p == 0.5, r.path_of("p"), " = ", o.p,
             " is not accepted with mode \"alternate\", which mirrors each image in every other epoch; accepted: 0.5");
  return o;
}

Json HorizontalFlipOptions::to_json() const {
  Json j{{"p", p}};
  if (mode != "random") j["mode"] = mode;  // the default stays out: older configs read back unchanged
  return j;
}

HorizontalFlip::HorizontalFlip(HorizontalFlipOptions o) : o_(o) {
  KILN_CHECK(o_.p >= 0.0 && o_.p <= 1.0, "horizontal_flip: p must be in [0, 1], got ", o_.p);
  KILN_CHECK(o_.mode == "random" || (o_.mode == "alternate" && o_.p == 0.5), "horizontal_flip: mode \"", o_.mode,
             "\" with p ", o_.p, " is not accepted; accepted: \"random\", or \"alternate\" with p 0.5");
  alternate_ = o_.mode == "alternate";
}

Json HorizontalFlip::to_json() const {
  Json j = o_.to_json();
  j["type"] = type();
  return j;
}

void HorizontalFlip::flip(Image& img) {
  const int64_t w = img.w, c = img.c;
  for (int64_t y = 0; y < img.h; ++y) {
    uint8_t* row = img.data() + y * w * c;
    for (int64_t a = 0, b = w - 1; a < b; ++a, --b)
      for (int64_t k = 0; k < c; ++k) std::swap(row[a * c + k], row[b * c + k]);
  }
}

void HorizontalFlip::apply(Image& img, SampleRng& rng, Image& scratch) const {
  // "alternate": the image's own coin, flipped by the epoch's parity. A stream without a sample
  // (a bare key: no epoch) draws as "random" does.
  if (alternate_ && rng.epoch() >= 0) {
    if (rng.sample_bit() != ((rng.epoch() & 1) != 0)) flip(img);
    return;
  }
  if (rng.uniform() < o_.p) flip(img);
}

}  // namespace kiln
