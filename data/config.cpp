// The data section of the config and its factory (see config.h).
#include "data/config.h"

#include "core/check.h"
#include "data/cifar.h"
#include "data/idx.h"

namespace kiln {

namespace {
const std::vector<std::string> kSources = {"mnist", "fashion_mnist", "cifar10", "cifar100", "synthetic"};
}  // namespace

DataConfig DataConfig::from_json(const Json& j, const std::string& path) {
  DataConfig c;
  JsonObjectReader r(j, path);
  r.require("source", c.source);
  check_choice(c.source, kSources, r.path_of("source"));
  const bool synthetic = c.source == "synthetic";
  if (r.read("root", c.root)) {
    KILN_CHECK(!synthetic, r.path_of("root"), ": the synthetic source reads no files; remove root");
    KILN_CHECK(!c.root.empty(), r.path_of("root"), ": empty folder name");
  } else {
    KILN_CHECK(synthetic, "missing required key ", r.path_of("root"), ": the folder of the ", c.source, " files");
  }
  if (const Json* s = r.get("synthetic")) {
    KILN_CHECK(synthetic, r.path_of("synthetic"), ": only used with source \"synthetic\", not \"", c.source, "\"");
    c.synthetic = SyntheticOptions::from_json(*s, r.path_of("synthetic"));
  }
  if (const Json* t = r.get("train_transforms")) c.train_transforms = Pipeline::from_json(*t, r.path_of("train_transforms"));
  if (const Json* t = r.get("val_transforms")) c.val_transforms = Pipeline::from_json(*t, r.path_of("val_transforms"));
  LoaderOptions::read_fields(r, c.loader);
  r.read("val_batch_size", c.val_batch_size);
  KILN_CHECK(c.val_batch_size >= 0, r.path_of("val_batch_size"), ": must be >= 0 (0 = batch_size), got ",
             c.val_batch_size);
  r.finish();
  // The pipelines' errors already name their JSON path (data.train_transforms[k]).
  c.train_transforms.output_shape(c.source_image_shape());
  c.val_transforms.output_shape(c.source_image_shape());
  return c;
}

Json DataConfig::to_json() const {
  Json j = loader.to_json();
  j["source"] = source;
  if (source == "synthetic") j["synthetic"] = synthetic.to_json();
  else j["root"] = root;
  j["train_transforms"] = train_transforms.to_json();
  j["val_transforms"] = val_transforms.to_json();
  j["val_batch_size"] = val_batch_size;
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
  if (source == "mnist" || source == "fashion_mnist") return {28, 28, 1};
  if (source == "cifar10" || source == "cifar100") return {32, 32, 3};
  if (source == "synthetic") return {synthetic.height, synthetic.width, synthetic.channels};
  check_choice(source, kSources, "data.source");
  return {};
}

std::shared_ptr<const Dataset> make_dataset(const DataConfig& c, Split split) {
  if (c.source == "mnist" || c.source == "fashion_mnist") return IdxDataset::open(c.root, split, c.source);
  if (c.source == "cifar10") return CifarDataset::open(CifarKind::cifar10, c.root, split);
  if (c.source == "cifar100") return CifarDataset::open(CifarKind::cifar100, c.root, split);
  if (c.source == "synthetic") {
    SyntheticOptions o = c.synthetic;
    if (split == Split::val) o.seed += 1;
    return std::make_shared<SyntheticDataset>(o, std::string("synthetic ") + split_name(split));
  }
  check_choice(c.source, kSources, "data.source");
  return nullptr;
}

std::unique_ptr<DataLoader> make_loader(const DataConfig& c, Split split, Shard shard,
                                        std::shared_ptr<const Dataset> dataset) {
  if (!dataset) dataset = make_dataset(c, split);
  return std::make_unique<DataLoader>(std::move(dataset), c.transforms(split), c.loader_options(split), shard);
}

}  // namespace kiln
