// An ImageNet-shaped folder of JPEGs made from a few real photos: the input of the GPU check's `e2e`
// part (tools/gpu_check.sh, docs/data.md "An ImageNet-shaped folder for speed checks"), where kiln's
// loader and PyTorch's DataLoader read the same files. The tree is ImageNet's as Kaggle ships it
// (the layout configs/imagenet_*.json read; data/image_folder.h):
//   OUT/ILSVRC/Data/CLS-LOC/train/<wnid>/<wnid>_<i>.JPEG   `train_per_class` per class
//   OUT/ILSVRC/Data/CLS-LOC/val/ILSVRC2012_val_<8 digits>.JPEG   one flat folder, classes interleaved
//   OUT/LOC_val_solution.csv    ImageId,PredictionString (the wnid and a whole-image box)
//   OUT/LOC_synset_mapping.txt  "<wnid> <name>" per class, in wnid order
// Each image is a random crop (25-100% of the photo's area) of one of the photos, resized to one of
// ImageNet's common sizes (500x375 most often; 375x500, 500x333, 500x500, 640x480, ...), maybe flipped,
// with a per-channel gain and film grain (16 levels by default: about 100 KB a JPEG at quality
// 90), encoded as baseline 4:2:0 JPEG. The bytes depend only on the photos, the options and the seed
// (not on the thread count). The images carry no class signal: the folder measures speed, not accuracy.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace kiln {

struct ImageNetLikeOptions {
  std::string photos;            // a folder of photos (PNG, JPEG, WebP; at least one, colour or grey)
  std::string out;               // the root to write; it must be missing or empty
  int64_t classes = 1000;        // 1..100000
  int64_t train_per_class = 30;  // 1..100000
  int64_t val_per_class = 5;     // 0..100000
  int quality = 90;              // JPEG quality 1..100
  double grain = 16;             // film grain's standard deviation in levels, 0..64
  uint64_t seed = 0;
  int threads = 0;  // 0: the machine's cores
};

struct ImageNetLikeReport {
  int64_t train_files = 0, val_files = 0;
  int64_t bytes = 0;  // of the JPEGs
  int64_t photos = 0;
  int threads = 0;
  double seconds = 0;
};

// The wnid-style name of class `c` ("n" and 8 digits, increasing with c).
std::string imagenet_like_wnid(int64_t c);

// Writes the tree; `progress(done, total)` (optional) is called from the writing threads now and
// then. Errors (kiln::Error) name the option, the photo or the file that failed; a failure part way
// leaves the files written so far.
ImageNetLikeReport make_imagenet_like(const ImageNetLikeOptions& o,
                                      const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace kiln
