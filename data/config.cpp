// The data section of the config and its factory (see config.h).
#include "data/config.h"

#include <algorithm>
#include <functional>
#include <type_traits>

#include "core/check.h"
#include "data/cifar.h"
#include "data/holdout.h"
#include "data/idx.h"
#include "data/image_folder.h"

namespace kiln {

namespace {
// --- each source's options: read from and written to the "data" object -------------------------

// root: required, and a folder name. `layout` is what the folder holds, for the message.
std::string read_root(JsonReader& r, const std::string& source, const std::string& layout = "") {
  std::string root;
  KILN_CHECK(r.read("root", root), r.path_of("root"), " is required: the folder of the ", source, " files", layout);
  KILN_CHECK(!root.empty(), r.path_of("root"), ": empty folder name");
  return root;
}

void read_image_options(JsonReader& r, ImageSourceOptions& o) {
  r.read("channels", o.channels);
  KILN_CHECK(o.channels == 1 || o.channels == 3, r.path_of("channels"), ": accepted: 1 (grey) or 3 (RGB), got ",
             o.channels);
  r.read("max_image_pixels", o.max_image_pixels);
  KILN_CHECK(o.max_image_pixels > 0, r.path_of("max_image_pixels"), ": must be positive, got ", o.max_image_pixels);
}

void write_image_options(const ImageSourceOptions& o, Json& j) {
  j["channels"] = o.channels;
  j["max_image_pixels"] = o.max_image_pixels;
}

// The image files of split `files`, decoded for the transforms of split `split`.
DecodeOptions decode_options(const ImageSourceOptions& o, const DataConfig& c, Split split) {
  DecodeOptions d;
  d.channels = o.channels;
  d.max_pixels = o.max_image_pixels;
  d.min_side = c.transforms(split).min_source_side();
  d.transforms = std::make_shared<const Pipeline>(c.transforms(split));  // sizes checked at the header
  return d;
}

ImageFolderOptions read_image_folder(JsonReader& r, const std::string& source) {
  ImageFolderOptions o;
  o.root = read_root(r, source, " (holding train/<class>/<image> and val/<class>/<image>)");
  read_image_options(r, o);
  // "" = none, so that `data.val_labels=` turns the key of a config off.
  r.read("val_labels", o.val_labels);
  r.read("class_names_file", o.class_names_file);
  return o;
}

void write_image_folder(const ImageFolderOptions& o, Json& j) {
  j["root"] = o.root;
  if (!o.val_labels.empty()) j["val_labels"] = o.val_labels;
  if (!o.class_names_file.empty()) j["class_names_file"] = o.class_names_file;
  write_image_options(o, j);
}

std::shared_ptr<const Dataset> open_image_folder(const ImageFolderOptions& o, const DataConfig& c, Split files,
                                                 Split split) {
  const std::string folder = o.root + "/" + split_name(files);
  // val/ is labelled with train/'s classes (torchvision labels each split by its own folders,
  // which silently shifts every label when val/ lacks a class).
  std::vector<std::string> classes;
  if (files == Split::val) classes = ImageFileDataset::class_folders(o.root + "/" + split_name(Split::train));
  const std::string name = std::string("image_folder ") + split_name(files) + " (" + folder + ")";
  std::shared_ptr<ImageFileDataset> d =
      files == Split::val && !o.val_labels.empty()
          ? ImageFileDataset::open_labelled_folder(folder, o.val_labels, decode_options(o, c, split), name, classes)
          : ImageFileDataset::open_folder(folder, decode_options(o, c, split), name, classes);
  if (!o.class_names_file.empty()) d->set_class_names(read_class_names_file(o.class_names_file, d->classes()));
  return d;
}

ImageListOptions read_image_list(JsonReader& r, const std::string&) {
  ImageListOptions o;
  for (auto [key, out] : {std::pair{"train_list", &o.train_list}, {"val_list", &o.val_list}}) {
    KILN_CHECK(r.read(key, *out), r.path_of(key), " is required: the list file of \"<path> <label>\" lines");
    KILN_CHECK(!out->empty(), r.path_of(key), ": empty file name");
  }
  // Without it the classes are counted from the list (0 here, never a given value): no default is listed.
  if (KeyRecorder* rec = KeyRecorder::current()) rec->note({r.path_of("num_classes"), "integer", Json(), false, false, ">= 1"});
  if (r.read("num_classes", o.num_classes))
    KILN_CHECK(o.num_classes > 0, r.path_of("num_classes"),
               ": a positive number of classes, only used with source \"image_list\" (got ", o.num_classes, ")");
  read_image_options(r, o);
  return o;
}

void write_image_list(const ImageListOptions& o, Json& j) {
  j["train_list"] = o.train_list;
  j["val_list"] = o.val_list;
  if (o.num_classes > 0) j["num_classes"] = o.num_classes;
  write_image_options(o, j);
}

std::shared_ptr<const Dataset> open_image_list(const ImageListOptions& o, const DataConfig& c, Split files,
                                               Split split) {
  const std::string& file = files == Split::train ? o.train_list : o.val_list;
  return ImageFileDataset::open_list(file, o.num_classes, decode_options(o, c, split),
                                     std::string("image_list ") + split_name(files) + " (" + file + ")");
}

SyntheticOptions read_synthetic(JsonReader& r, const std::string&) {
  const Json* s = r.find("synthetic");
  return s ? SyntheticOptions::from_json(*s, r.path_of("synthetic")) : SyntheticOptions{};
}

std::shared_ptr<const Dataset> open_synthetic(const SyntheticOptions& o, const DataConfig&, Split files, Split) {
  SyntheticOptions split_options = o;
  if (files == Split::val) split_options.seed += 1;
  return std::make_shared<SyntheticDataset>(split_options, std::string("synthetic ") + split_name(files));
}

// --- the registry ----------------------------------------------------------------------------

// A data source: the keys of "data" it reads (every other source refuses them), its options' reader
// and writer, the shape of its images (0 x 0 when they vary) and how it opens a split's files.
struct Source {
  std::vector<std::string> keys;
  std::function<SourceOptions(JsonReader&, const std::string& source)> read;
  std::function<void(const DataConfig&, Json&)> write;
  std::function<ImageShape(const DataConfig&)> shape;
  std::function<std::shared_ptr<const Dataset>(const DataConfig&, Split files, Split split)> open;
  // Why this source refuses another source's key, where "only used with ..." would say too little.
  std::vector<std::pair<std::string, std::string>> refusals = {};
};

// The options of `c`, which must be the alternative `O` of its source.
template <class O>
const O& options_of(const DataConfig& c) {
  const O* o = std::get_if<O>(&c.options);
  KILN_CHECK(o, "DataConfig: source \"", c.source, "\" with the options of another kind of source");
  return *o;
}

// A Source over options `O`: read(JsonReader&, source) -> O, write(const O&, Json&),
// shape(const O&) -> ImageShape, open(const O&, const DataConfig&, Split files, Split split).
template <class O, class Read, class Write, class Shape, class Open>
Source source(std::vector<std::string> keys, Read read, Write write, Shape shape, Open open,
              std::vector<std::pair<std::string, std::string>> refusals = {}) {
  return {std::move(keys),
          [read](JsonReader& r, const std::string& s) -> SourceOptions { return O(read(r, s)); },
          [write](const DataConfig& c, Json& j) { write(options_of<O>(c), j); },
          [shape](const DataConfig& c) { return shape(options_of<O>(c)); },
          [open](const DataConfig& c, Split files, Split split) { return open(options_of<O>(c), c, files, split); },
          std::move(refusals)};
}

// The schema's documentation of a source: the keys its reader requires (image sources vary in size, so
// their batches need transforms that end in a fixed size) and the structs that document its keys, its
// own options first (its meaning of "root" wins).
ComponentDocs source_docs(Json sample, std::vector<std::string> own) {
  for (const char* s : {"DataConfig", "DataKeys", "LoaderOptions", "IdxOptions", "CifarOptions", "ImageFolderOptions",
                        "ImageListOptions"})
    if (std::find(own.begin(), own.end(), s) == own.end()) own.push_back(s);
  return {"", std::move(sample), std::move(own), {}};
}

// kiln's sources, one entry each, with their options.
void add_builtin_sources(Registry<Source>& r) {
  auto fixed = [](int64_t h, int64_t w, int64_t c) { return [=](const auto&) { return ImageShape{h, w, c}; }; };
  auto varying = [](const ImageSourceOptions& o) { return ImageShape{0, 0, o.channels}; };
  auto write_root = [](const auto& o, Json& j) { j["root"] = o.root; };
  auto idx = source<IdxOptions>(
      {"root"}, [](JsonReader& r, const std::string& s) { return IdxOptions{read_root(r, s)}; }, write_root,
      fixed(28, 28, 1),
      [](const IdxOptions& o, const DataConfig& c, Split files, Split) -> std::shared_ptr<const Dataset> {
        return IdxDataset::open(o.root, files, c.source);
      });
  auto cifar = [&](CifarKind k) {
    return source<CifarOptions>(
        {"root"}, [](JsonReader& r, const std::string& s) { return CifarOptions{read_root(r, s)}; }, write_root,
        fixed(32, 32, 3),
        [k](const CifarOptions& o, const DataConfig&, Split files, Split) -> std::shared_ptr<const Dataset> {
          return CifarDataset::open(k, o.root, files);
        });
  };
  const Json root = {{"root", "r"}};
  const Json fixed_size = Json::array({{{"type", "center_crop"}, {"size", 8}}});
  r.add("mnist", idx, source_docs(root, {"IdxOptions"}));
  r.add("fashion_mnist", idx, source_docs(root, {"IdxOptions"}));
  r.add("cifar10", cifar(CifarKind::cifar10), source_docs(root, {"CifarOptions"}));
  r.add("cifar100", cifar(CifarKind::cifar100), source_docs(root, {"CifarOptions"}));
  r.add("synthetic",
        source<SyntheticOptions>(
            {"synthetic"}, read_synthetic, [](const SyntheticOptions& o, Json& j) { j["synthetic"] = o.to_json(); },
            [](const SyntheticOptions& o) { return ImageShape{o.height, o.width, o.channels}; }, open_synthetic,
            {{"root", "the synthetic source reads no files; remove root"}}),
        source_docs({{"synthetic", Json::object()}}, {}));
  r.add("image_folder",
        source<ImageFolderOptions>({"root", "channels", "max_image_pixels", "val_labels", "class_names_file"},
                                   read_image_folder, write_image_folder, varying, open_image_folder),
        source_docs({{"root", "r"}, {"train_transforms", fixed_size}, {"val_transforms", fixed_size}}, {"ImageFolderOptions"}));
  r.add("image_list",
        source<ImageListOptions>({"train_list", "val_list", "num_classes", "channels", "max_image_pixels"},
                                 read_image_list, write_image_list, varying, open_image_list,
                                 {{"root", "the image_list source reads data.train_list and data.val_list; remove root"}}),
        source_docs({{"train_list", "a"}, {"val_list", "b"}, {"train_transforms", fixed_size}, {"val_transforms", fixed_size}},
                    {"ImageListOptions"}));
}

// A program's own source (register_data_source): its options are the JSON its reader returns.
Source registered_source(DataSourceSpec spec) {
  KILN_CHECK(spec.read && spec.shape && spec.open, "register_data_source: read, shape and open are all required");
  auto read = spec.read;
  auto shape = spec.shape;
  auto open = spec.open;
  return source<RegisteredSourceOptions>(
      spec.keys, [read](JsonReader& r, const std::string&) { return RegisteredSourceOptions{read(r)}; },
      [](const RegisteredSourceOptions& o, Json& j) {
        if (o.options.is_object()) j.update(o.options);
      },
      [shape](const RegisteredSourceOptions& o) { return shape(o.options); },
      [open](const RegisteredSourceOptions& o, const DataConfig&, Split files, Split) { return open(o.options, files); });
}

Registry<Source>& sources() {
  static Registry<Source> r = [] {
    Registry<Source> b("a data source");
    add_builtin_sources(b);
    return b;
  }();
  return r;
}

const Source& source_of(const std::string& name) {
  return sources().at(name, "data.source");
}

bool takes(const Source& s, const std::string& key) {
  return std::find(s.keys.begin(), s.keys.end(), key) != s.keys.end();
}

// Reads the options of `source` from `r` (its "data" object), and refuses the keys of the other
// sources: "<path>: only used with source \"image_list\", not \"mnist\"" (or the source's refusal).
SourceOptions read_source_options(JsonReader& r, const std::string& source) {
  const Source& own = source_of(source);
  SourceOptions options = own.read(r, source);
  std::vector<std::string> others;  // the other sources' keys, in registry order
  for (const std::string& name : sources().names())
    for (const std::string& key : source_of(name).keys)
      if (!takes(own, key) && std::find(others.begin(), others.end(), key) == others.end()) others.push_back(key);
  for (const std::string& key : others) {
    if (!r.find(key)) continue;  // find() also lists the key among the accepted ones
    for (const auto& [refused, why] : own.refusals) KILN_CHECK(refused != key, r.path_of(key), ": ", why);
    std::vector<std::string> users;
    for (const std::string& name : sources().names())
      if (takes(source_of(name), key)) users.push_back(name);
    if (users.size() == 1)
      KILN_FAIL(r.path_of(key), ": only used with source \"", users[0], "\", not \"", source, "\"");
    const std::string last = users.back();
    users.pop_back();
    KILN_FAIL(r.path_of(key), ": only used with the ", join(users), " and ", last, " sources");
  }
  return options;
}
}  // namespace

std::vector<std::string> data_source_names() { return sources().names(); }

const ComponentDocs& data_source_docs(const std::string& name) {
  source_of(name);  // an unknown name: the registry's error
  return sources().entry(name)->docs;
}

void register_data_source(const std::string& name, DataSourceSpec spec, ComponentDocs docs,
                          const SourcePlace& where) {
  sources().add(name, registered_source(std::move(spec)), std::move(docs), where);
}


DataConfig DataConfig::from_json(const Json& j, const std::string& path, bool batches) {
  DataConfig c;
  JsonReader r(j, path);
  r.require("source", c.source);
  sources().at(c.source, r.path_of("source"));  // an unknown source: the names and the linking hint
  c.options = read_source_options(r, c.source);
  if (const Json* t = r.find("train_transforms")) c.train_transforms = Pipeline::from_json(*t, r.path_of("train_transforms"));
  if (const Json* t = r.find("val_transforms")) c.val_transforms = Pipeline::from_json(*t, r.path_of("val_transforms"));
  LoaderOptions::read_fields(r, c.loader);
  r.read("val_batch_size", c.val_batch_size);
  r.read("holdout", c.holdout);
  KILN_CHECK(c.holdout >= 0, r.path_of("holdout"), ": the number of training images held out as the validation split ",
             "(0 = none: validate on the source's validation files), got ", c.holdout);
  r.read("holdout_seed", c.holdout_seed);
  r.read("upload", c.upload);
  check_choice(c.upload, {"auto", "u8", "float"}, r.path_of("upload"));
  KILN_CHECK(!(c.upload == "float" && c.loader.dtype == "u8"), r.path_of("upload"),
             ": \"float\" normalises on the CPU, but data.dtype is \"u8\" (bytes); accepted: data.upload = \"u8\" or "
             "\"auto\" with data.dtype = \"u8\", or data.dtype = \"f32\"/\"bf16\"");
  if (const Json* p = r.find("progressive_resize"))
    c.progressive_resize = ProgressiveResizeOptions::from_json(*p, r.path_of("progressive_resize"));
  KILN_CHECK(c.val_batch_size >= 0, r.path_of("val_batch_size"), ": must be >= 0 (0 = batch_size), got ",
             c.val_batch_size);
  r.finish();
  // The pipelines' errors already name their JSON path (data.train_transforms[k]).
  for (auto [key, p] : {std::pair{"train_transforms", &c.train_transforms}, {"val_transforms", &c.val_transforms}}) {
    ImageShape out = p->output_shape(c.source_image_shape());
    KILN_CHECK(out.known() || !batches, r.path_of(key), ": ", c.source, " images vary in size, so the transforms must end in a ",
               "fixed size (random_resized_crop, center_crop or random_crop) for the images to stack into a batch");
  }
  if (c.upload == "u8" || c.loader.dtype == "u8")
    for (auto [key, p] : {std::pair{"train_transforms", &c.train_transforms}, {"val_transforms", &c.val_transforms}})
      KILN_CHECK(p->has_normalize(), r.path_of(key), ": ", c.upload == "u8" ? "data.upload = \"u8\"" : "data.dtype = \"u8\"",
                 " sends the pixels before the final normalize to the device, but this list does not end with one; add "
                 "{\"type\": \"normalize\", \"mean\": [...], \"std\": [...]} as its last step, or set data.upload = \"float\"");
  const ImageShape train_out = c.train_transforms.output_shape(c.source_image_shape());
  if (train_out.known()) c.progressive_resize.check_fits(train_out.h, train_out.w, r.path_of("progressive_resize"));
  return c;
}

Json DataConfig::to_json() const {
  Json j = loader.to_json();
  j["source"] = source;
  source_of(source).write(*this, j);
  j["train_transforms"] = train_transforms.to_json();
  j["val_transforms"] = val_transforms.to_json();
  j["val_batch_size"] = val_batch_size;
  j["upload"] = upload;
  if (holdout > 0) j["holdout"] = holdout, j["holdout_seed"] = holdout_seed;
  if (progressive_resize.enabled()) j["progressive_resize"] = progressive_resize.to_json();
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

bool DataConfig::upload_u8(bool gpu, bool mixup) const {
  const bool u8 = upload == "u8" || loader.dtype == "u8";
  KILN_CHECK(!(u8 && mixup), "data.upload = \"u8\" (or data.dtype = \"u8\") does not combine with train.mixup: "
             "MixUp/CutMix mix normalised float images on the CPU; accepted: data.upload = \"auto\" or \"float\" with mixup");
  if (u8) return true;
  return upload == "auto" && gpu && !mixup && train_transforms.has_normalize() && val_transforms.has_normalize();
}

ImageShape DataConfig::source_image_shape() const { return source_of(source).shape(*this); }

ImageSourceOptions DataConfig::image_options() const {
  return std::visit(
      [](const auto& o) {
        if constexpr (std::is_base_of_v<ImageSourceOptions, std::decay_t<decltype(o)>>) return ImageSourceOptions(o);
        else return ImageSourceOptions{};
      },
      options);
}

namespace {
// The files of split `files`, decoded for the transforms of split `split`.
std::shared_ptr<const Dataset> open_files(const DataConfig& c, Split files, Split split) {
  return source_of(c.source).open(c, files, split);
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
  auto loader = std::make_unique<DataLoader>(std::move(dataset), c.transforms(split), c.loader_options(split), shard);
  if (split == Split::train) loader->set_progressive_resize(c.progressive_resize);
  return loader;
}

}  // namespace kiln
