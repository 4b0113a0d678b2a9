// The "data" section of a training config, and the factory that turns it into datasets and loaders.
//
// Accepted keys (JSON key = field name; anything else is an error naming its path with the
// closest accepted key):
//   source            "mnist" | "fashion_mnist" | "cifar10" | "cifar100" | "synthetic" |
//                     "image_folder" | "image_list"                                        (required)
//   root              folder of the dataset files (required, and only accepted, for the file sources
//                     but image_list); for image_folder the folder holding train/<class>/<image>
//                     and val/<class>/<image> (torchvision's ImageNet layout; data/image_folder.h)
//   val_labels        image_folder only: a CSV labelling a flat val/ folder ("<image id>,<wnid> ...",
//                     ImageNet's LOC_val_solution.csv)                           (default "")
//   class_names_file  image_folder only: "<wnid> <name>, <name>" lines naming the class folders
//                     (ImageNet's LOC_synset_mapping.txt)                        (default "")
//   train_list, val_list  image_list only (required): files of "<path> <label>" lines, relative
//                     paths relative to the list file's folder (data/image_folder.h)
//   num_classes       image_list only: labels must lie in [0, num_classes); default 1 + the largest
//   channels          image sources: 3 (RGB, default) or 1 (grey)
//   max_image_pixels  image sources: larger images are refused before decoding (default 89478485)
//   synthetic         {"size", "height", "width", "channels", "num_classes", "seed"} (SyntheticOptions,
//                     data/synthetic.h; only with source "synthetic"; the val split uses seed + 1)
//   train_transforms  list of transforms for training images (data/pipeline.h)   (default [])
//   val_transforms    list of transforms for validation images                   (default [])
//   batch_size, shuffle, drop_last, workers, prefetch, seed, dtype, skip_bad_samples,
//   max_bad_fraction  the training loader (LoaderOptions, data/loader.h)
//   upload            "auto" | "u8" | "float": where images become floats (default "auto": u8 on a
//                     GPU, float on the CPU; docs/data.md, "Bytes to the device")
//   val_batch_size    samples per validation batch; 0 = batch_size               (default 0)
//   holdout           N > 0: validate on N training images held out of training (a fixed seeded
//                     choice, data/holdout.h), not on the validation files      (default 0)
//   holdout_seed      the seed of that choice                                     (default 0)
//   progressive_resize  the training images' size by epoch (ProgressiveResizeOptions,
//                     data/progressive.h; default none: the transforms' size throughout)
// The validation loader never shuffles nor drops samples; it shares workers, prefetch, seed, dtype,
// skip_bad_samples and max_bad_fraction.
//
// Example:
//   "data": {"source": "fashion_mnist", "root": "/usr/share/datasets/fashion-mnist",
//            "train_transforms": [{"type": "random_crop", "size": 28, "padding": 2},
//                                 {"type": "horizontal_flip"},
//                                 {"type": "normalize", "mean": [0.286], "std": [0.353]}],
//            "val_transforms": [{"type": "normalize", "mean": [0.286], "std": [0.353]}],
//            "batch_size": 64, "workers": 2}
// Image sources decode JPEGs at reduced size when the split's transforms allow it
// (Pipeline::min_source_side(), data/image_decode.h), and need transforms that end in a fixed size.
// ImageNet: configs/imagenet_resnet18.json; the whole story is docs/data.md.
// from_json() checks everything that needs no file: keys, types, values, and each pipeline against
// the source's image shape (a crop larger than the image, normalize with the wrong channel count).
// Files are opened by make_dataset(). Tests: tests/data/config_test.cpp, tests/data/image_file_test.cpp.
//
// The source's own keys (root, train_list, val_list, num_classes, channels, max_image_pixels,
// synthetic) land in DataConfig::options, one struct a kind of source (IdxOptions, CifarOptions,
// SyntheticOptions, ImageFolderOptions, ImageListOptions). Each source's entry in the registry of
// config.cpp lists its keys and reads, writes and opens its options; a key of another source is
// refused ("data.train_list: only used with source \"image_list\", not \"mnist\""). Adding a source to
// kiln: its options struct here (and an alternative of SourceOptions), its entry in config.cpp
// (docs/architecture.md); a program adds its own with register_data_source() below.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "core/registry.h"
#include "data/dataset.h"
#include "core/json_reader.h"
#include "data/loader.h"
#include "data/pipeline.h"
#include "data/progressive.h"
#include "data/synthetic.h"

namespace kiln {

// The options of each kind of source, one struct a kind (the "options" of DataConfig). Their keys
// are flat keys of "data" (or, for "synthetic", the "synthetic" object); each source's entry in the
// registry of config.cpp reads and writes them, and every other source refuses them.

// "mnist", "fashion_mnist": IDX files (data/idx.h)
struct IdxOptions {
  /// folder holding the IDX files (required)
  std::string root;
};

// "cifar10", "cifar100": the binary version (data/cifar.h)
struct CifarOptions {
  /// folder holding the binary files, or the folder the archive unpacks to (required)
  std::string root;
};

// The decoding options of both image sources, "image_folder" and "image_list" (data/image_decode.h)
struct ImageSourceOptions {
  /// decode to 3 channels (RGB) or 1 (grey) (default 3)
  int64_t channels = 3;
  /// refuse images of more pixels, read from the header before decoding
  /// (default 89478485, PIL's limit)
  int64_t max_image_pixels = 89478485;
};

// "image_folder": root/train/<class>/<image> and root/val/<class>/<image> (data/image_folder.h), or
// ImageNet as downloaded: a flat root/val/ with val_labels, class names from class_names_file
// (docs/data.md, "ImageNet as downloaded")
struct ImageFolderOptions : ImageSourceOptions {
  /// folder holding train/ and val/ (required)
  std::string root;
  /// a CSV of "<image id>,<wnid> ..." lines labelling a flat val/ folder of images (ImageNet's
  /// LOC_val_solution.csv); "" = none: val/<class>/<image> (default "")
  std::string val_labels;
  /// a file of "<wnid> <name>, <name>" lines naming the class folders by their first name
  /// (ImageNet's LOC_synset_mapping.txt); "" = none: the folder names (default "")
  std::string class_names_file;
};

// "image_list": files of "<path> <label>" lines (data/image_folder.h)
struct ImageListOptions : ImageSourceOptions {
  /// the list files of the train and val splits (required)
  std::string train_list, val_list;
  /// the number of classes, >= 1; labels must lie below it (default: 1 + the largest label of the
  /// split's list)
  int64_t num_classes = 0;
};

// A source registered by a program (register_data_source below): the options its reader returned.
struct RegisteredSourceOptions {
  Json options;
};

// One alternative a kind of source ("synthetic": SyntheticOptions, data/synthetic.h).
using SourceOptions =
    std::variant<IdxOptions, CifarOptions, SyntheticOptions, ImageFolderOptions, ImageListOptions, RegisteredSourceOptions>;

struct DataConfig {
  /// a registered data source: kiln's file sources, "synthetic", or a program's own
  /// (register_data_source) (required)
  std::string source;
  // the options of the source: IdxOptions for "mnist" and "fashion_mnist", CifarOptions for
  // "cifar10" and "cifar100", SyntheticOptions, ImageFolderOptions or ImageListOptions
  SourceOptions options;
  /// transforms of training images, in order; without any, the source's pixels / 255 (image_folder
  /// and image_list images vary in size: there the list is required and must end in a fixed size)
  Pipeline train_transforms;
  /// transforms of validation images, in order; without any, the source's pixels / 255; image_folder
  /// and image_list require them, as train_transforms
  Pipeline val_transforms;
  // the training loader's options (defaults of LoaderOptions; its keys are flat keys of "data")
  LoaderOptions loader;
  /// samples per validation batch; 0 = loader.batch_size (default 0)
  int64_t val_batch_size = 0;
  /// training images held out as the validation split (data/holdout.h); 0 = validate on the
  /// source's validation files (default 0)
  int64_t holdout = 0;
  /// the seed of the held-out choice (default 0)
  uint64_t holdout_seed = 0;
  /// smaller training images in the early epochs (data/progressive.h) (default off)
  ProgressiveResizeOptions progressive_resize;
  /// where the images become floats: "u8" (the loaders deliver the pixels before the final
  /// normalize and the training device normalises them, ops::normalize_u8: a quarter of f32's
  /// upload; both transform lists must end with normalize), "float" (the loaders normalise on the
  /// CPU to data.dtype), or "auto": "u8" on a device with its own memory (a GPU) when both lists end
  /// with normalize and train.mixup is off, else "float" (default "auto")
  std::string upload = "auto";

  // `batches` = false skips the check that the transforms of an image source end in a fixed size
  // (for `kiln data export`, which reads the images without transforming them).
  static DataConfig from_json(const Json& j, const std::string& path = "data", bool batches = true);
  Json to_json() const;

  // The loader options of a split (validation: no shuffle, no drop_last, val_batch_size).
  LoaderOptions loader_options(Split split) const;
  const Pipeline& transforms(Split split) const { return split == Split::train ? train_transforms : val_transforms; }
  // Whether the loaders deliver u8 batches on a device that has (gpu = true) or shares (false) the
  // host's memory: data.upload resolved ("auto" as above; `mixup`: train.mixup is on, which mixes
  // float images on the CPU). Throws, naming data.upload, for "u8" with mixup.
  bool upload_u8(bool gpu, bool mixup) const;
  // The image shape of the source, known without opening files.
  ImageShape source_image_shape() const;
  // The decoding options of an image source; the defaults for the other sources (which decode no
  // files, but `kiln predict` and `kiln export` decode the images they are given).
  ImageSourceOptions image_options() const;
};
KILN_JSON_CONVERSIONS(DataConfig)

// The data.source names, in registry order, e.g. for the config schema.
std::vector<std::string> data_source_names();
// What the config schema says of a source (core/registry.h); an unknown name is the registry's error.
const ComponentDocs& data_source_docs(const std::string& name);

// A data source of a program's own (docs/library.md, "Registering your components"): the config names it
// as data.source, and training, evaluation, AutoBatch, holdout and the loaders use it like kiln's own.
struct DataSourceSpec {
  // Its keys of "data" (flat, as kiln's "root"); every other source refuses them, and it refuses theirs.
  std::vector<std::string> keys;
  // Reads and checks its keys from the data section's reader (r.read/require/get, r.path_of(key) names a key
  // in errors); returns its options, which the run's config.json records (they must read back the same).
  std::function<Json(JsonReader& data)> read;
  // The shape of its images, known without opening files (height = width = 0 when they vary; then the
  // transforms must end in a fixed size).
  std::function<ImageShape(const Json& options)> shape;
  // Opens a split (Split::train or Split::val) of the data: a Dataset (data/dataset.h).
  std::function<std::shared_ptr<const Dataset>(const Json& options, Split split)> open;
};
// Adds a data source; throws if `name` is taken (naming both places). `docs`: what `--help` says of it.
void register_data_source(const std::string& name, DataSourceSpec spec, ComponentDocs docs = {},
                          const SourcePlace& where = SourcePlace::current());

// Opens the split's dataset (reads the files). Errors name the file.
std::shared_ptr<const Dataset> make_dataset(const DataConfig& config, Split split);
// A loader for the split over `dataset` (or, when null, make_dataset(config, split)).
std::unique_ptr<DataLoader> make_loader(const DataConfig& config, Split split, Shard shard = {},
                                        std::shared_ptr<const Dataset> dataset = nullptr);

}  // namespace kiln
