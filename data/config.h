// The "data" section of a training config, and the factory that turns it into datasets and loaders.
//
// Accepted keys (JSON key = field name; anything else is an error naming its path with the
// closest accepted key):
//   source            "mnist" | "fashion_mnist" | "cifar10" | "cifar100" | "synthetic"   (required)
//   root              folder of the dataset files (required, and only accepted, for file sources)
//   synthetic         {"size", "height", "width", "channels", "num_classes", "seed"} (SyntheticOptions,
//                     data/synthetic.h; only with source "synthetic"; the val split uses seed + 1)
//   train_transforms  list of transforms for training images (data/pipeline.h)   (default [])
//   val_transforms    list of transforms for validation images                   (default [])
//   batch_size, shuffle, drop_last, workers, prefetch, seed, dtype
//                     the training loader (LoaderOptions, data/loader.h)
//   val_batch_size    samples per validation batch; 0 = batch_size               (default 0)
// The validation loader never shuffles nor drops samples; it shares workers, prefetch, seed, dtype.
//
// Example:
//   "data": {"source": "fashion_mnist", "root": "/usr/share/datasets/fashion-mnist",
//            "train_transforms": [{"type": "random_crop", "size": 28, "padding": 2},
//                                 {"type": "horizontal_flip"},
//                                 {"type": "normalize", "mean": [0.286], "std": [0.353]}],
//            "val_transforms": [{"type": "normalize", "mean": [0.286], "std": [0.353]}],
//            "batch_size": 64, "workers": 2}
// from_json() checks everything that needs no file: keys, types, values, and each pipeline against
// the source's image shape (a crop larger than the image, normalize with the wrong channel count).
// Files are opened by make_dataset(). Tests: tests/data/config_test.cpp.
#pragma once
#include <memory>
#include <string>

#include "data/dataset.h"
#include "core/json_read.h"
#include "data/loader.h"
#include "data/pipeline.h"
#include "data/synthetic.h"

namespace kiln {

struct DataConfig {
  /// dataset: "mnist", "fashion_mnist", "cifar10", "cifar100" or "synthetic" (required)
  std::string source;
  /// folder holding the dataset files (required unless source is "synthetic")
  std::string root;
  /// shape, size and seed of the "synthetic" source (defaults of SyntheticOptions)
  SyntheticOptions synthetic;
  /// transforms of training images, in order (default none: pixels / 255)
  Pipeline train_transforms;
  /// transforms of validation images, in order (default none: pixels / 255)
  Pipeline val_transforms;
  /// the training loader's options (defaults of LoaderOptions)
  LoaderOptions loader;
  /// samples per validation batch; 0 = loader.batch_size (default 0)
  int64_t val_batch_size = 0;

  static DataConfig from_json(const Json& j, const std::string& path = "data");
  Json to_json() const;

  // The loader options of a split (validation: no shuffle, no drop_last, val_batch_size).
  LoaderOptions loader_options(Split split) const;
  const Pipeline& transforms(Split split) const { return split == Split::train ? train_transforms : val_transforms; }
  // The image shape of the source, known without opening files.
  ImageShape source_image_shape() const;
};
KILN_JSON_CONVERSIONS(DataConfig)

// Opens the split's dataset (reads the files). Errors name the file.
std::shared_ptr<const Dataset> make_dataset(const DataConfig& config, Split split);
// A loader for the split over `dataset` (or, when null, make_dataset(config, split)).
std::unique_ptr<DataLoader> make_loader(const DataConfig& config, Split split, Shard shard = {},
                                        std::shared_ptr<const Dataset> dataset = nullptr);

}  // namespace kiln
