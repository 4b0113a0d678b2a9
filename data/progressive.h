// Progressive resizing (FFCV's ResNet recipes, fast.ai's "progressive resizing"): the early epochs
// train on smaller images, the last ones at full size. A convolution's cost grows with the pixel
// count, so an epoch at 20x20 costs about half one at 28x28 (docs/recipes.md has the measured
// images/s); the network's global average pool accepts any size, and the final epochs at full size
// settle the batch-norm statistics and the weights at the size they are evaluated at.
//
// The config ("data.progressive_resize", training split only):
//   {"min_size": 20, "max_size": 28, "start_epoch": 8, "end_epoch": 16, "step": 4}
// Epochs are counted from 1, as the training log counts them. Epochs 1..start_epoch train at
// min_size, epochs end_epoch.. at max_size, and those between at the linear interpolation
//   min_size + (max_size - min_size) * (epoch - start_epoch) / (end_epoch - start_epoch),
// rounded to the nearest multiple of `step` (halves up) and kept within [min_size, max_size].
// The size depends on the epoch alone, so a resumed run trains at the sizes the uninterrupted one
// did, and the batches stay a pure function of (seed, epoch, index).
//
// The loader resizes each training image after its transforms (before normalize) from the
// transforms' square output (e.g. 28x28) to size x size, with resize's "auto" rule by default
// (cv::INTER_AREA when it shrinks, bilinear when it grows). Validation images are never resized.
// Tests: tests/data/progressive_test.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "core/json_reader.h"

namespace kiln {

struct ProgressiveResizeOptions {
  /// the side of the first epochs' images in pixels, 1..65536 (required; without
  /// data.progressive_resize there is no progressive resizing)
  int64_t min_size = 0;
  /// the side from end_epoch on; 0 = the side the training transforms give (default 0)
  int64_t max_size = 0;
  /// the last epoch (counted from 1) at min_size, >= 0 (default 0)
  int64_t start_epoch = 0;
  /// the first epoch at max_size, > start_epoch (required)
  int64_t end_epoch = 0;
  /// sizes in between are multiples of step, >= 1 (default 1)
  int64_t step = 1;
  /// "auto", "linear" or "area", as resize's (default "auto")
  std::string interpolation = "auto";

  bool enabled() const { return min_size > 0; }
  // The side of the images of `epoch` (counted from 0, as DataLoader::start_epoch() counts) when
  // the transforms give `full` x `full` images.
  int64_t size_at(int64_t epoch, int64_t full) const;
  // Whether the schedule suits transforms that give `h` x `w` images; throws naming `path`.
  void check_fits(int64_t h, int64_t w, const std::string& path) const;

  static ProgressiveResizeOptions from_json(const Json& j, const std::string& path = "progressive_resize");
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(ProgressiveResizeOptions)

}  // namespace kiln
