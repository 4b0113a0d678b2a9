// Pipeline and the transform registry (see pipeline.h).
#include "data/pipeline.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <functional>

#include "core/check.h"
#include "data/augment.h"
#include "data/auto_augment.h"
#include "data/color.h"
#include "data/erasing.h"
#include "data/resize.h"

namespace kiln {

namespace {
template <class T, class Options>
TransformMaker maker() {
  return [](const Json& j, const std::string& path) { return std::make_shared<T>(Options::from_json(j, path)); };
}

// kiln's transforms, one line each, with what the config schema needs: the options a reader requires
// ({"size": 8} for the crops) and the struct documenting them. "normalize" is not a Transform: it ends
// the pipeline (Pipeline::from_json handles it), and is listed for the accepted types and suggestions.
void add_builtin_transforms(Registry<TransformMaker>& r) {
  const auto docs = [](Json sample, const char* options) { return ComponentDocs{"", std::move(sample), {options, "TransformKeys"}, {}}; };
  const Json size = {{"size", 8}};
  r.add("random_crop", maker<RandomCrop, RandomCropOptions>(), docs(size, "RandomCropOptions"));
  r.add("horizontal_flip", maker<HorizontalFlip, HorizontalFlipOptions>(), docs(Json::object(), "HorizontalFlipOptions"));
  r.add("random_resized_crop", maker<RandomResizedCrop, RandomResizedCropOptions>(), docs(size, "RandomResizedCropOptions"));
  r.add("resize", maker<Resize, ResizeOptions>(), docs(size, "ResizeOptions"));
  r.add("center_crop", maker<CenterCrop, CenterCropOptions>(), docs(size, "CenterCropOptions"));
  r.add("color_jitter", maker<ColorJitter, ColorJitterOptions>(), docs(Json::object(), "ColorJitterOptions"));
  // fill and value are read only when given: the sample gives them so that they are listed
  r.add("trivial_augment_wide", maker<TrivialAugmentWide, TrivialAugmentWideOptions>(),
        docs({{"fill", 0}}, "TrivialAugmentWideOptions"));
  r.add("rand_augment", maker<RandAugment, RandAugmentOptions>(), docs({{"fill", 0}}, "RandAugmentOptions"));
  r.add("random_erasing", maker<RandomErasing, RandomErasingOptions>(), docs({{"value", 0}}, "RandomErasingOptions"));
  r.add("normalize", [](const Json&, const std::string& path) -> std::shared_ptr<const Transform> {
         KILN_FAIL(path, ": \"normalize\" is not an image-to-image transform (normalize ends a pipeline)");
       }, docs(Json::object(), "NormalizeOptions"));
}

}  // namespace

Registry<TransformMaker>& transform_registry() {
  static Registry<TransformMaker> r = [] {
    Registry<TransformMaker> b("a transform type");
    add_builtin_transforms(b);
    return b;
  }();
  return r;
}

void register_transform(const std::string& type, TransformMaker make, ComponentDocs docs, const SourcePlace& where) {
  KILN_CHECK(type != "normalize", "register_transform at ", place_text(where), ": \"normalize\" is kiln's own");
  transform_registry().add(type, std::move(make), std::move(docs), where);
}

namespace {
std::string read_type(const Json& j, const std::string& path) {
  KILN_CHECK(j.is_object(), path, ": expected a transform object like {\"type\": \"random_crop\", ...}, got ",
             json_type_name(j), " ", j.dump());
  auto it = j.find("type");
  KILN_CHECK(it != j.end(), path, ": missing key \"type\"; accepted types: ", join(transform_registry().names()));
  std::string type;
  json_read(*it, json_path(path, "type"), type);
  transform_registry().at(type, json_path(path, "type"));  // an unknown type: the names and the linking hint
  return type;
}
}  // namespace

namespace {
// A size computed in double, printed as a whole number (or in e-notation past int64).
std::string whole(double v) {
  if (v >= 0 && v < 9.0e18) return std::to_string(static_cast<long long>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}
}  // namespace

std::pair<int64_t, int64_t> checked_output_size(const std::string& step, ImageShape in, double out_h, double out_w) {
  const double in_pixels = in.h > 0 && in.w > 0 ? static_cast<double>(in.h) * static_cast<double>(in.w) : 0.0;
  const double limit = std::max(static_cast<double>(kMaxTransformPixels), in_pixels);
  const double pixels = out_h * out_w;
  // NOTE: written so that NaN fails every comparison and is refused.
  const bool sides_ok = out_h >= 1 && out_w >= 1 && out_h <= INT_MAX && out_w <= INT_MAX;
  auto side = [](int64_t v) { return v > 0 ? std::to_string(v) : std::string("?"); };
  KILN_CHECK(sides_ok && pixels <= limit, step, ": a ", side(in.w), "x", side(in.h),
             " image (width x height) would become ", whole(out_w), "x", whole(out_h), " = ", whole(pixels), " pixels, over the limit of ", kMaxTransformPixels,
             " pixels a transform may produce (the decoders' default data.max_image_pixels; an output no larger than "
             "its input is always allowed); refused before allocating it: an image this elongated or a size this "
             "large does not fit this step");
  return {static_cast<int64_t>(out_h), static_cast<int64_t>(out_w)};
}

std::vector<std::string> transform_types() { return transform_registry().names(); }

std::shared_ptr<const Transform> make_transform(const Json& j, const std::string& path) {
  const std::string type = read_type(j, path);
  const TransformMaker& make = transform_registry().at(type, json_path(path, "type"));
  return call_component(path, "type", type, transform_registry().entry(type)->place, [&] { return make(j, path); });
}

Pipeline Pipeline::from_json(const Json& list, const std::string& path) {
  Pipeline p;
  if (list.is_null()) return p;
  KILN_CHECK(list.is_array(), path, ": expected a list of transforms, got ", json_type_name(list), " ", list.dump());
  for (size_t i = 0; i < list.size(); ++i) {
    std::string at = json_path(path, i);
    if (read_type(list[i], at) == "normalize") {
      KILN_CHECK(i + 1 == list.size(), at, ": normalize must be the last transform (it turns bytes into floats); ",
                 list.size() - i - 1, " more follow it");
      p.set_normalize(NormalizeOptions::from_json(list[i], at), at);
    } else {
      p.add(make_transform(list[i], at), at);
    }
  }
  return p;
}

Json Pipeline::to_json() const {
  Json list = Json::array();
  for (const auto& t : steps_) list.push_back(t->to_json());
  if (has_normalize_) {
    Json n = normalize_.options().to_json();
    n["type"] = "normalize";
    list.push_back(n);
  }
  return list;
}

Pipeline& Pipeline::add(std::shared_ptr<const Transform> t, std::string path) {
  KILN_CHECK(t, "Pipeline::add: null transform");
  steps_.push_back(std::move(t));
  paths_.push_back(path.empty() ? steps_.back()->type() : std::move(path));
  return *this;
}

Pipeline& Pipeline::set_normalize(NormalizeOptions o, std::string path) {
  normalize_ = Normalize(std::move(o));
  normalize_path_ = std::move(path);
  has_normalize_ = true;
  return *this;
}

ImageShape Pipeline::output_shape(ImageShape in) const {
  ImageShape s = in;
  for (size_t i = 0; i < steps_.size(); ++i) {
    try {
      s = steps_[i]->output_shape(s);
    } catch (const Error& e) {
      throw Error(paths_[i] + ": " + e.what());  // keeps the one source location already in e
    }
  }
  normalize_.check_channels(s.c, normalize_path_);
  return s;
}

int64_t Pipeline::min_source_side() const {
  int64_t need = Transform::kFullSize;  // the batch holds what the last step gives
  for (size_t i = steps_.size(); i-- > 0;) need = steps_[i]->min_input_side(need);
  return need == Transform::kFullSize ? 0 : need;
}

bool Pipeline::crops_first() const {
  return !steps_.empty() && dynamic_cast<const RandomResizedCrop*>(steps_[0].get()) != nullptr;
}

CropBox Pipeline::first_box(int64_t h, int64_t w, uint64_t sample_key) const {
  KILN_CHECK(crops_first(), "Pipeline::first_box: the first step is not a random_resized_crop");
  SampleRng rng = SampleRng(sample_key).fork(0);
  return static_cast<const RandomResizedCrop&>(*steps_[0]).choose(h, w, rng);
}

int64_t Pipeline::first_crop_size() const {
  KILN_CHECK(crops_first(), "Pipeline::first_crop_size: the first step is not a random_resized_crop");
  return static_cast<const RandomResizedCrop&>(*steps_[0]).options().size;
}

void Pipeline::augment_region(Image& img, const CropBox& box, const SampleRng& base, Workspace& ws) const {
  KILN_CHECK(crops_first(), "Pipeline::augment_region: the first step is not a random_resized_crop");
  const auto& rrc = static_cast<const RandomResizedCrop&>(*steps_[0]);
  try {
    rrc.output_shape(img.shape());  // the output bound, before resize_image allocates
  } catch (const Error& e) {
    throw Error(paths_[0] + ": " + e.what());
  }
  resize_image(img, box, rrc.options().size, rrc.options().size, rrc.options().interpolation, ws.scratch);
  std::swap(img, ws.scratch);
  for (size_t i = 1; i < steps_.size(); ++i) {
    SampleRng rng = base.fork(i);
    steps_[i]->apply(img, rng, ws.scratch);
  }
}

void Pipeline::augment(Image& img, const SampleRng& base, Workspace& ws) const {
  for (size_t i = 0; i < steps_.size(); ++i) {
    SampleRng rng = base.fork(i);
    try {
      steps_[i]->apply(img, rng, ws.scratch);
    } catch (const Error& e) {
      throw Error(paths_[i] + ": " + e.what());  // which step of which config list
    }
  }
}

}  // namespace kiln
