// The Transform interface (one step of an augmentation pipeline on a uint8 HWC image) and the
// per-sample random stream it draws from. A sample's randomness is a pure function of
// (seed, epoch, dataset index, step), never of the thread or the order samples are processed in,
// so a run gives the same batches with 1 worker or 16.
// Implementations: data/augment.h (RandomCrop, HorizontalFlip), data/resize.h (RandomResizedCrop,
// Resize, CenterCrop), data/color.h (ColorJitter), data/auto_augment.h (TrivialAugmentWide,
// RandAugment), data/erasing.h (RandomErasing); data/normalize.h is the final
// uint8 -> float step; data/pipeline.h chains them and maps config names to them.
// Output bound: every step that computes an output size checks it with checked_output_size() before
// it allocates (a 1 x 5,000,000 PNG through resize(256) would ask for 256 x 1.28 G pixels); the
// limit is kMaxTransformPixels (see there and docs/data.md, "Output size bound").
// Tests: tests/data/transforms_test.cpp, tests/data/hardened_input_test.cpp.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "core/rng.h"
#include "data/dataset.h"
#include "core/json_reader.h"

namespace kiln {

// The most pixels a transform may produce: the decoders' default pixel limit (DecodeOptions::max_pixels,
// data.max_image_pixels: PIL's 89478485, ~268 MB as RGB), so that no step makes an image larger than
// a decodable one; an output no larger than the step's input is always allowed (a source configured
// with a higher max_image_pixels is never refused by a step that does not enlarge). Each side must
// also fit OpenCV's int.
inline constexpr int64_t kMaxTransformPixels = 89478485;

// The output size (height, width) of step `step` for an input of shape `in`, from sizes computed in
// double (no int64 product or cast can overflow first). Throws kiln::Error naming the step, the
// input and output sizes and the limit when the output is over the bound above; nothing is
// allocated before. Defined in data/pipeline.cpp.
std::pair<int64_t, int64_t> checked_output_size(const std::string& step, ImageShape in, double out_h, double out_w);

// A counter-based random stream: draw i is mix64 of (key, i). Cheap to create per sample.
// A stream made by for_sample() also knows its sample across epochs (sample_bit(), epoch()), for
// steps whose draw is tied between epochs (horizontal_flip's "alternate" mode); one made from a
// bare key does not (epoch() < 0).
class SampleRng {
 public:
  explicit SampleRng(uint64_t key) : key_(key) {}

  // The key of one sample's randomness in one epoch.
  static uint64_t sample_key(uint64_t seed, uint64_t epoch, uint64_t index) {
    return mix64(mix64(mix64(seed) ^ epoch) ^ index);
  }
  // The stream of sample `index` in `epoch`: draws as SampleRng(sample_key(seed, epoch, index)),
  // plus the sample's identity across epochs.
  static SampleRng for_sample(uint64_t seed, uint64_t epoch, uint64_t index) {
    SampleRng r(sample_key(seed, epoch, index));
    r.stable_ = mix64(mix64(seed ^ 0x73616d706c65ull) ^ index);  // "sample"
    r.epoch_ = static_cast<int64_t>(epoch & 0x7fffffffffffffffull);
    return r;
  }
  // An independent stream for sub-task `stream` (pipeline step k uses stream k); the sample's
  // identity goes with it, forked the same way.
  SampleRng fork(uint64_t stream) const {
    SampleRng r(mix64(key_ ^ (0x632be59bd9b4e019ull * (stream + 1))));
    r.stable_ = mix64(stable_ ^ (0x632be59bd9b4e019ull * (stream + 1)));
    r.epoch_ = epoch_;
    return r;
  }
  // The epoch this stream belongs to, or -1 when it was made from a bare key.
  int64_t epoch() const { return epoch_; }
  // A random bit of the sample (and stream) that is the same in every epoch (valid when epoch() >= 0).
  bool sample_bit() const { return (stable_ >> 63) != 0; }

  uint64_t next_u64() { return mix64(key_ + 0x9e3779b97f4a7c15ull * ++counter_); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0 (multiply-shift; the bias is below 2^-40 for any image size).
  int64_t uniform_int(int64_t n) {
    return static_cast<int64_t>((static_cast<unsigned __int128>(next_u64()) * static_cast<uint64_t>(n)) >> 64);
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
  uint64_t stable_ = 0;
  int64_t epoch_ = -1;
};

class Transform {
 public:
  virtual ~Transform() = default;
  // The config name ("random_crop"); to_json() gives {"type": type(), <options>}.
  virtual std::string type() const = 0;
  virtual Json to_json() const = 0;
  // The shape this step produces from `in`. h = w = 0 (size varies) passes through unless the step
  // makes the size fixed. Throws kiln::Error, naming the step, for an input it cannot handle.
  virtual ImageShape output_shape(ImageShape in) const = 0;
  // Transforms `img` in place, drawing from `rng`. `scratch` is a per-thread image a step may
  // write into and swap with `img`, so steady-state runs allocate nothing.
  virtual void apply(Image& img, SampleRng& rng, Image& scratch) const = 0;

  // For reduced-size decoding (data/image_decode.h): the shorter side this step needs of its input
  // when the steps after it need `need`. kFullSize (the default) forbids any reduction: the step
  // works at pixel positions (crops, pads) or passes the size on to the batch. A step that only
  // recolours returns `need`; a step that resamples to a fixed size returns what it needs for that
  // size, whatever `need` is. Pipeline::min_source_side() walks the steps from the last.
  static constexpr int64_t kFullSize = std::numeric_limits<int64_t>::max();
  virtual int64_t min_input_side(int64_t need) const { return kFullSize; }
};

}  // namespace kiln
