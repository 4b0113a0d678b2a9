// RandomResizedCrop, Resize, CenterCrop (see resize.h).
#include "data/resize.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <opencv2/imgproc.hpp>

#include "core/check.h"

namespace kiln {

namespace {
const std::vector<std::string> kInterpolations = {"auto", "linear", "area"};

// A [min, max] pair of positive numbers.
void check_range(const std::vector<double>& v, const std::string& path) {
  KILN_CHECK(v.size() == 2 && v[0] > 0 && v[0] <= v[1], path, ": expected [min, max] with 0 < min <= max, got ",
             Json(v).dump());
}

Json with_type(Json j, const std::string& type) {
  j["type"] = type;
  return j;
}
}  // namespace

void resize_image(const Image& in, const CropBox& b, int64_t out_h, int64_t out_w, const std::string& interpolation,
                  Image& out) {
  KILN_CHECK(b.top >= 0 && b.left >= 0 && b.h > 0 && b.w > 0 && b.top + b.h <= in.h && b.left + b.w <= in.w,
             "resize: box (top ", b.top, ", left ", b.left, ", ", b.h, "x", b.w, ") is outside the ", in.shape().str(),
             " image");
  // The one place every resampling step allocates: bounded here as well as in each step's output_shape.
  checked_output_size("resize", {b.h, b.w, in.c}, static_cast<double>(out_h), static_cast<double>(out_w));
  KILN_CHECK(in.h <= INT_MAX && in.w <= INT_MAX, "resize: a ", in.w, "x", in.h,
             " image has a side over OpenCV's limit of ", INT_MAX, " pixels");
  const int type = CV_8UC(static_cast<int>(in.c));
  const cv::Mat src = cv::Mat(static_cast<int>(in.h), static_cast<int>(in.w), type, const_cast<uint8_t*>(in.data()))(
      cv::Rect(static_cast<int>(b.left), static_cast<int>(b.top), static_cast<int>(b.w), static_cast<int>(b.h)));
  out.resize(out_h, out_w, in.c);
  cv::Mat dst(static_cast<int>(out_h), static_cast<int>(out_w), type, out.data());
  if (out_h == b.h && out_w == b.w) {
    src.copyTo(dst);
    return;
  }
  int flag = cv::INTER_LINEAR;
  if (interpolation == "area" || (interpolation == "auto" && out_h < b.h && out_w < b.w)) flag = cv::INTER_AREA;
  cv::resize(src, dst, dst.size(), 0, 0, flag);
}

// --- RandomResizedCrop ----------------------------------------------------------------------------

RandomResizedCropOptions RandomResizedCropOptions::from_json(const Json& j, const std::string& path) {
  RandomResizedCropOptions o;
  JsonReader r(j, path);
  r.allow("type");
  r.require("size", o.size);
  r.read("scale", o.scale);
  r.read("ratio", o.ratio);
  r.read("interpolation", o.interpolation);
  r.finish();
  KILN_CHECK(o.size > 0, r.path_of("size"), ": must be positive, got ", o.size);
  check_range(o.scale, r.path_of("scale"));
  KILN_CHECK(o.scale[1] <= 1.0, r.path_of("scale"), ": a fraction of the image area, at most 1; got ", Json(o.scale).dump());
  check_range(o.ratio, r.path_of("ratio"));
  check_choice(o.interpolation, kInterpolations, r.path_of("interpolation"));
  return o;
}

Json RandomResizedCropOptions::to_json() const {
  return Json{{"size", size}, {"scale", scale}, {"ratio", ratio}, {"interpolation", interpolation}};
}

RandomResizedCrop::RandomResizedCrop(RandomResizedCropOptions o) : o_(std::move(o)) {
  KILN_CHECK(o_.size > 0, "random_resized_crop: size must be positive, got ", o_.size);
  check_range(o_.scale, "random_resized_crop.scale");
  check_range(o_.ratio, "random_resized_crop.ratio");
  check_choice(o_.interpolation, kInterpolations, "random_resized_crop.interpolation");
}

Json RandomResizedCrop::to_json() const { return with_type(o_.to_json(), type()); }

CropBox RandomResizedCrop::choose(int64_t H, int64_t W, SampleRng& rng) const {
  const double area = static_cast<double>(H) * static_cast<double>(W);
  const double lr0 = std::log(o_.ratio[0]), lr1 = std::log(o_.ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (o_.scale[0] + (o_.scale[1] - o_.scale[0]) * rng.uniform());
    const double ar = std::exp(lr0 + (lr1 - lr0) * rng.uniform());
    const int64_t w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * ar)));
    const int64_t h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / ar)));
    if (w > 0 && w <= W && h > 0 && h <= H) {
      const int64_t top = rng.uniform_int(H - h + 1);
      const int64_t left = rng.uniform_int(W - w + 1);
      return {top, left, h, w};
    }
  }
  const double in_ratio = static_cast<double>(W) / static_cast<double>(H);
  int64_t w = W, h = H;
  if (in_ratio < o_.ratio[0]) h = static_cast<int64_t>(std::nearbyint(static_cast<double>(w) / o_.ratio[0]));
  else if (in_ratio > o_.ratio[1]) w = static_cast<int64_t>(std::nearbyint(static_cast<double>(h) * o_.ratio[1]));
  h = std::clamp<int64_t>(h, 1, H);
  w = std::clamp<int64_t>(w, 1, W);
  return {(H - h) / 2, (W - w) / 2, h, w};
}

ImageShape RandomResizedCrop::output_shape(ImageShape in) const {
  const double s = static_cast<double>(o_.size);
  checked_output_size(type(), in, s, s);
  return {o_.size, o_.size, in.c};
}

void RandomResizedCrop::apply(Image& img, SampleRng& rng, Image& scratch) const {
  output_shape(img.shape());  // before anything is allocated for the output
  const CropBox b = choose(img.h, img.w, rng);
  resize_image(img, b, o_.size, o_.size, o_.interpolation, scratch);
  std::swap(img, scratch);
}

int64_t RandomResizedCrop::min_input_side(int64_t) const {
  const double k = std::max(std::sqrt(o_.ratio[1] / o_.scale[0]), 1.0 / std::sqrt(o_.ratio[0] * o_.scale[0]));
  return static_cast<int64_t>(std::ceil(static_cast<double>(o_.size) * k));
}

// --- Resize ---------------------------------------------------------------------------------------

ResizeOptions ResizeOptions::from_json(const Json& j, const std::string& path) {
  ResizeOptions o;
  JsonReader r(j, path);
  r.allow("type");
  r.require("size", o.size);
  r.read("interpolation", o.interpolation);
  r.finish();
  KILN_CHECK(o.size > 0, r.path_of("size"), ": must be positive, got ", o.size);
  check_choice(o.interpolation, kInterpolations, r.path_of("interpolation"));
  return o;
}

Json ResizeOptions::to_json() const { return Json{{"size", size}, {"interpolation", interpolation}}; }

Resize::Resize(ResizeOptions o) : o_(std::move(o)) {
  KILN_CHECK(o_.size > 0, "resize: size must be positive, got ", o_.size);
  check_choice(o_.interpolation, kInterpolations, "resize.interpolation");
}

Json Resize::to_json() const { return with_type(o_.to_json(), type()); }

std::pair<int64_t, int64_t> Resize::output_size(int64_t h, int64_t w) const {
  const int64_t s = std::min(h, w), l = std::max(h, w);
  if (s == o_.size) return {h, w};
  // NOTE: int(size * long / short) in Python's floating point, as torchvision computes it; kept in
  // double until checked_output_size has bounded it (1 x 5,000,000 to 256 gives 1.28e9 x 256).
  const double nl = std::trunc(static_cast<double>(o_.size) * static_cast<double>(l) / static_cast<double>(s));
  const double size = static_cast<double>(o_.size);
  return checked_output_size(type(), {h, w, 0}, h <= w ? size : nl, h <= w ? nl : size);
}

ImageShape Resize::output_shape(ImageShape in) const {
  if (in.h <= 0 || in.w <= 0) return {0, 0, in.c};
  auto [h, w] = output_size(in.h, in.w);
  return {h, w, in.c};
}

void Resize::apply(Image& img, SampleRng&, Image& scratch) const {
  auto [h, w] = output_size(img.h, img.w);
  if (h == img.h && w == img.w) return;
  resize_image(img, {0, 0, img.h, img.w}, h, w, o_.interpolation, scratch);
  std::swap(img, scratch);
}

// --- CenterCrop -----------------------------------------------------------------------------------

CenterCropOptions CenterCropOptions::from_json(const Json& j, const std::string& path) {
  CenterCropOptions o;
  JsonReader r(j, path);
  r.allow("type");
  r.require("size", o.size);
  r.finish();
  KILN_CHECK(o.size > 0, r.path_of("size"), ": must be positive, got ", o.size);
  return o;
}

Json CenterCropOptions::to_json() const { return Json{{"size", size}}; }

CenterCrop::CenterCrop(CenterCropOptions o) : o_(o) {
  KILN_CHECK(o_.size > 0, "center_crop: size must be positive, got ", o_.size);
}

Json CenterCrop::to_json() const { return with_type(o_.to_json(), type()); }

CropBox CenterCrop::box(int64_t H, int64_t W) const {
  const int64_t s = o_.size;
  auto offset = [s](int64_t side) {
    return side >= s ? static_cast<int64_t>(std::nearbyint(static_cast<double>(side - s) / 2.0)) : -((s - side) / 2);
  };
  return {offset(H), offset(W), s, s};
}

ImageShape CenterCrop::output_shape(ImageShape in) const {
  const double s = static_cast<double>(o_.size);
  checked_output_size(type(), in, s, s);
  return {o_.size, o_.size, in.c};
}

void CenterCrop::apply(Image& img, SampleRng&, Image& scratch) const {
  output_shape(img.shape());  // before the output is allocated
  const CropBox b = box(img.h, img.w);
  const int64_t s = o_.size, c = img.c;
  scratch.resize(s, s, c);
  const bool inside = b.top >= 0 && b.left >= 0 && b.top + s <= img.h && b.left + s <= img.w;
  if (!inside) std::memset(scratch.data(), 0, static_cast<size_t>(s * s * c));
  // The rows and columns of the output that come from the image.
  const int64_t y0 = std::max<int64_t>(0, -b.top), y1 = std::min(s, img.h - b.top);
  const int64_t x0 = std::max<int64_t>(0, -b.left), x1 = std::min(s, img.w - b.left);
  for (int64_t y = y0; y < y1; ++y)
    std::memcpy(scratch.data() + (y * s + x0) * c, img.data() + ((b.top + y) * img.w + b.left + x0) * c,
                static_cast<size_t>((x1 - x0) * c));
  std::swap(img, scratch);
}

}  // namespace kiln
