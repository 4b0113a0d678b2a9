// Pipeline: the transforms of one split, in order, ending in Normalize. Built from the config's
// list, e.g.
//   [{"type": "random_crop", "size": 28, "padding": 4},
//    {"type": "horizontal_flip"},
//    {"type": "normalize", "mean": [0.286], "std": [0.353]}]
// Accepted types (kiln's own, one line each in pipeline.cpp's registry; a program adds its own with
// register_transform() or KILN_REGISTER, core/registry.h, and a config then names them like these):
//   random_crop      RandomCropOptions     (data/augment.h)
//   horizontal_flip  HorizontalFlipOptions (data/augment.h)
//   random_resized_crop  RandomResizedCropOptions (data/resize.h)
//   resize           ResizeOptions         (data/resize.h)
//   center_crop      CenterCropOptions     (data/resize.h)
//   color_jitter     ColorJitterOptions    (data/color.h)
//   trivial_augment_wide  TrivialAugmentWideOptions (data/auto_augment.h)
//   rand_augment     RandAugmentOptions    (data/auto_augment.h)
//   random_erasing   RandomErasingOptions  (data/erasing.h)
//   normalize        NormalizeOptions      (data/normalize.h), at most once and last
// Step k of a sample draws from SampleRng(sample_key).fork(k), so adding a step leaves the others'
// draws unchanged. Tests: tests/data/transforms_test.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/registry.h"
#include "data/normalize.h"
#include "data/transform.h"

namespace kiln {

// Builds a transform from its options object (with "type"); `path` names it in errors
// ("data.train_transforms[1]"). Read the options with JsonReader and finish() it. The transform's
// to_json() must give back {"type": ..., options} that rebuild it (a run's config.json holds them).
using TransformMaker = std::function<std::shared_ptr<const Transform>(const Json& options, const std::string& path)>;
// The registry itself (kiln's transforms first).
Registry<TransformMaker>& transform_registry();
// Adds a transform type; throws if `type` is taken (naming both places). `docs`: what `--help` says of it.
void register_transform(const std::string& type, TransformMaker make, ComponentDocs docs = {},
                        const SourcePlace& where = SourcePlace::current());

// The transform type names, in registry order ("normalize" included), e.g. for the config schema.
std::vector<std::string> transform_types();
// One transform from its JSON object ({"type": ..., options}); `path` names it in errors.
// "normalize" is not a Transform (it ends the pipeline) and is rejected here.
std::shared_ptr<const Transform> make_transform(const Json& j, const std::string& path);

class Pipeline {
 public:
  Pipeline() = default;  // no augmentation; pixels / 255
  // `list` must be a JSON list (null reads as empty); `path` names it in errors.
  static Pipeline from_json(const Json& list, const std::string& path = "transforms");
  Json to_json() const;

  Pipeline& add(std::shared_ptr<const Transform> t, std::string path = "");
  Pipeline& set_normalize(NormalizeOptions o, std::string path = "normalize");

  // The shape of the pipeline's output for inputs of shape `in`; throws naming the failing step.
  ImageShape output_shape(ImageShape in) const;

  // The shorter side a source may reduce its images to before the first step (reduced JPEG decoding,
  // data/image_decode.h), walking Transform::min_input_side() from the last step; 0 = no reduction.
  // E.g. resize(256) + center_crop(224) gives 256, random_resized_crop(224) 915, random_crop 0.
  int64_t min_source_side() const;

  // Per-thread buffers so that repeated calls do not allocate.
  struct Workspace {
    Image scratch;
  };
  // Runs every transform on `img` in place with the randomness of `sample`: the loader's
  // SampleRng::for_sample(seed, epoch, index), or a bare key (SampleRng(key): the steps tied
  // between epochs then draw as in a first epoch).
  void augment(Image& img, const SampleRng& sample, Workspace& ws) const;
  void augment(Image& img, uint64_t sample_key, Workspace& ws) const { augment(img, SampleRng(sample_key), ws); }
  // Region decoding (Dataset::get_region_into): when the first step is a random_resized_crop, the
  // source may decode only its box. first_box() draws the box exactly as the step would on an
  // image of h x w (same stream), and augment_region() runs the pipeline on `img`, a region holding
  // that box at `box`, giving the same result as augment() on the whole image.
  bool crops_first() const;
  CropBox first_box(int64_t h, int64_t w, uint64_t sample_key) const;
  // The side of the first random_resized_crop's square output (what first_box is resized to).
  int64_t first_crop_size() const;
  void augment_region(Image& img, const CropBox& box, const SampleRng& sample, Workspace& ws) const;
  void augment_region(Image& img, const CropBox& box, uint64_t sample_key, Workspace& ws) const {
    augment_region(img, box, SampleRng(sample_key), ws);
  }

  // Writes the normalised pixels of `img` to `dst` (img.numel() values of f32 or bf16).
  void write(const Image& img, void* dst, DType dtype) const { normalize_.write(img, dst, dtype); }

  size_t num_transforms() const { return steps_.size(); }
  const Transform& transform(size_t i) const { return *steps_[i]; }
  const Normalize& normalize() const { return normalize_; }
  // Whether the list ended with a normalize step (a u8 loader needs one: data/loader.h).
  bool has_normalize() const { return has_normalize_; }

 private:
  std::vector<std::shared_ptr<const Transform>> steps_;
  std::vector<std::string> paths_;  // where each step came from, for messages
  Normalize normalize_;
  std::string normalize_path_ = "normalize";
  bool has_normalize_ = false;
};

}  // namespace kiln
