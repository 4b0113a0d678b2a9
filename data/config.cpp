// The data section of the config and its factory (see config.h).
#include "data/config.h"

#include <functional>

#include "core/check.h"
#include "core/registry.h"
#include "data/cifar.h"
#include "data/holdout.h"
#include "data/idx.h"
#include "data/image_folder.h"

namespace kiln {

namespace {
bool is_image_source(const std::string& s) { return s == "image_folder" || s == "image_list"; }

// The image files of split `files`, decoded for the transforms of split `split`.
std::shared_ptr<const Dataset> open_image_files(const DataConfig& c, Split files, Split split) {
  DecodeOptions d;
  d.channels = c.channels;
  d.max_pixels = c.max_image_pixels;
  d.min_side = c.transforms(split).min_source_side();
  if (c.source == "image_list") {
    const std::string& file = files == Split::train ? c.train_list : c.val_list;
    return ImageFileDataset::open_list(file, c.num_classes, d,
                                       std::string("image_list ") + split_name(files) + " (" + file + ")");
  }
  const std::string folder = c.root + "/" + split_name(files);
  // val/ is labelled with train/'s classes (torchvision labels each split by its own folders,
  // which silently shifts every label when val/ lacks a class).
  std::vector<std::string> classes;
  if (files == Split::val) classes = ImageFileDataset::class_folders(c.root + "/" + split_name(Split::train));
  return ImageFileDataset::open_folder(folder, d, std::string("image_folder ") + split_name(files) + " (" + folder + ")",
                                       classes);
}

// A data source: the shape of its images (0 x 0 when they vary) and how to open a split's files.
struct Source {
  std::function<ImageShape(const DataConfig&)> shape;
  std::function<std::shared_ptr<const Dataset>(const DataConfig&, Split files, Split split)> open;
};

// The registry of data.source (core/registry.h): one line per source.
const Registry<Source>& sources() {
  auto fixed = [](int64_t h, int64_t w, int64_t c) { return [=](const DataConfig&) { return ImageShape{h, w, c}; }; };
  auto idx = [](const DataConfig& c, Split files, Split) -> std::shared_ptr<const Dataset> {
    return IdxDataset::open(c.root, files, c.source);
  };
  auto cifar = [](CifarKind k) {
    return [k](const DataConfig& c, Split files, Split) -> std::shared_ptr<const Dataset> {
      return CifarDataset::open(k, c.root, files);
    };
  };
  auto images = [](const DataConfig& c) { return ImageShape{0, 0, c.channels}; };
  static const Registry<Source> r("a data source", {
      {"mnist", {fixed(28, 28, 1), idx}},
      {"fashion_mnist", {fixed(28, 28, 1), idx}},
      {"cifar10", {fixed(32, 32, 3), cifar(CifarKind::cifar10)}},
      {"cifar100", {fixed(32, 32, 3), cifar(CifarKind::cifar100)}},
      {"synthetic",
       {[](const DataConfig& c) { return ImageShape{c.synthetic.height, c.synthetic.width, c.synthetic.channels}; },
        [](const DataConfig& c, Split files, Split) -> std::shared_ptr<const Dataset> {
          SyntheticOptions o = c.synthetic;
          if (files == Split::val) o.seed += 1;
          return std::make_shared<SyntheticDataset>(o, std::string("synthetic ") + split_name(files));
        }}},
      {"image_folder", {images, open_image_files}},
      {"image_list", {images, open_image_files}},
  });
  return r;
}
}  // namespace

DataConfig DataConfig::from_json(const Json& j, const std::string& path, bool batches) {
  DataConfig c;
  JsonReader r(j, path);
  r.require("source", c.source);
  check_choice(c.source, sources().names(), r.path_of("source"));
  const bool synthetic = c.source == "synthetic", list = c.source == "image_list";
  if (r.read("root", c.root)) {
    KILN_CHECK(!synthetic, r.path_of("root"), ": the synthetic source reads no files; remove root");
    KILN_CHECK(!list, r.path_of("root"), ": the image_list source reads data.train_list and data.val_list; remove root");
    KILN_CHECK(!c.root.empty(), r.path_of("root"), ": empty folder name");
  } else {
    KILN_CHECK(synthetic || list, r.path_of("root"), " is required: the folder of the ", c.source, " files",
               c.source == "image_folder" ? " (holding train/<class>/<image> and val/<class>/<image>)" : "");
  }
  if (const Json* s = r.find("synthetic")) {
    KILN_CHECK(synthetic, r.path_of("synthetic"), ": only used with source \"synthetic\", not \"", c.source, "\"");
    c.synthetic = SyntheticOptions::from_json(*s, r.path_of("synthetic"));
  }
  if (const Json* t = r.find("train_transforms")) c.train_transforms = Pipeline::from_json(*t, r.path_of("train_transforms"));
  if (const Json* t = r.find("val_transforms")) c.val_transforms = Pipeline::from_json(*t, r.path_of("val_transforms"));
  LoaderOptions::read_fields(r, c.loader);
  r.read("val_batch_size", c.val_batch_size);
  r.read("holdout", c.holdout);
  KILN_CHECK(c.holdout >= 0, r.path_of("holdout"), ": the number of training images held out as the validation split ",
             "(0 = none: validate on the source's validation files), got ", c.holdout);
  r.read("holdout_seed", c.holdout_seed);
  KILN_CHECK(c.val_batch_size >= 0, r.path_of("val_batch_size"), ": must be >= 0 (0 = batch_size), got ",
             c.val_batch_size);
  for (auto [key, out] : {std::pair{"train_list", &c.train_list}, {"val_list", &c.val_list}}) {
    if (r.read(key, *out)) {
      KILN_CHECK(list, r.path_of(key), ": only used with source \"image_list\", not \"", c.source, "\"");
      KILN_CHECK(!out->empty(), r.path_of(key), ": empty file name");
    } else {
      KILN_CHECK(!list, r.path_of(key), " is required: the list file of \"<path> <label>\" lines");
    }
  }
  const bool image = is_image_source(c.source);
  for (auto [key, out] : {std::pair{"channels", &c.channels}, {"max_image_pixels", &c.max_image_pixels}})
    KILN_CHECK(!r.read(key, *out) || image, r.path_of(key), ": only used with the image_folder and image_list sources");
  KILN_CHECK(c.channels == 1 || c.channels == 3, r.path_of("channels"), ": accepted: 1 (grey) or 3 (RGB), got ",
             c.channels);
  KILN_CHECK(c.max_image_pixels > 0, r.path_of("max_image_pixels"), ": must be positive, got ", c.max_image_pixels);
  if (r.read("num_classes", c.num_classes))
    KILN_CHECK(list && c.num_classes > 0, r.path_of("num_classes"),
               ": a positive number of classes, only used with source \"image_list\" (got ", c.num_classes, ")");
  r.finish();
  // The pipelines' errors already name their JSON path (data.train_transforms[k]).
  for (auto [key, p] : {std::pair{"train_transforms", &c.train_transforms}, {"val_transforms", &c.val_transforms}}) {
    ImageShape out = p->output_shape(c.source_image_shape());
    KILN_CHECK(out.known() || !batches, r.path_of(key), ": ", c.source, " images vary in size, so the transforms must end in a ",
               "fixed size (random_resized_crop, center_crop or random_crop) for the images to stack into a batch");
  }
  return c;
}

Json DataConfig::to_json() const {
  Json j = loader.to_json();
  j["source"] = source;
  if (source == "synthetic") j["synthetic"] = synthetic.to_json();
  else if (source == "image_list") j["train_list"] = train_list, j["val_list"] = val_list;
  else j["root"] = root;
  if (is_image_source(source)) {
    j["channels"] = channels;
    j["max_image_pixels"] = max_image_pixels;
    if (source == "image_list" && num_classes > 0) j["num_classes"] = num_classes;
  }
  j["train_transforms"] = train_transforms.to_json();
  j["val_transforms"] = val_transforms.to_json();
  j["val_batch_size"] = val_batch_size;
  if (holdout > 0) j["holdout"] = holdout, j["holdout_seed"] = holdout_seed;
  return j;
}

LoaderOptions DataConfig::loader_options(Split split) const {
  LoaderOptions o = loader;
  if (split == Split::val) {
    o.shuffle = false;
    o.drop_last = false;
    if (val_batch_size > 0) o.batch_size = val_batch_size;
  }
  return o;
}

ImageShape DataConfig::source_image_shape() const {
  check_choice(source, sources().names(), "data.source");
  return sources().at(source, "data.source").shape(*this);
}

namespace {
// The files of split `files`, decoded for the transforms of split `split`.
std::shared_ptr<const Dataset> open_files(const DataConfig& c, Split files, Split split) {
  check_choice(c.source, sources().names(), "data.source");
  return sources().at(c.source, "data.source").open(c, files, split);
}
}  // namespace

std::shared_ptr<const Dataset> make_dataset(const DataConfig& c, Split split) {
  if (c.holdout == 0) return open_files(c, split, split);
  // Both splits from the training files (holdout.h); the validation files are not read.
  std::shared_ptr<const Dataset> base = open_files(c, Split::train, split);
  KILN_CHECK(c.holdout < base->size(), "data.holdout: ", c.holdout, " images cannot be held out of the ", base->size(),
             " of ", base->name(), "; accepted: 1 to ", base->size() - 1, " (0 = none)");
  std::vector<int64_t> idx = holdout_indices(base->size(), c.holdout, c.holdout_seed, split);
  std::string name = base->name() + " [holdout " + (split == Split::val ? "val: " : "train: ") +
                     std::to_string(idx.size()) + " of " + std::to_string(base->size()) + "]";
  return std::make_shared<SubsetDataset>(std::move(base), std::move(idx), std::move(name));
}

std::unique_ptr<DataLoader> make_loader(const DataConfig& c, Split split, Shard shard,
                                        std::shared_ptr<const Dataset> dataset) {
  if (!dataset) dataset = make_dataset(c, split);
  return std::make_unique<DataLoader>(std::move(dataset), c.transforms(split), c.loader_options(split), shard);
}

}  // namespace kiln
