// The data config: accepted keys, defaults, errors naming the JSON path with suggestions, the
// factory for every source, and the benchmark helper (run, not timed).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/check.h"
#include "data/bench.h"
#include "data/config.h"
#include "data_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;

namespace {
std::string config_error(const Json& j) {
  return kt::error_of([&] { DataConfig::from_json(j); });
}
}  // namespace

TEST(DataConfig, ParsesAndRoundTrips) {
  Json j = Json::parse(R"({
    "source": "fashion_mnist", "root": "/some/where",
    "train_transforms": [{"type": "random_crop", "size": 28, "padding": 2}, {"type": "horizontal_flip"},
                         {"type": "normalize", "mean": 0.286, "std": 0.353}],
    "val_transforms": [{"type": "normalize", "mean": [0.286], "std": [0.353]}],
    "batch_size": 32, "workers": 3, "val_batch_size": 100, "dtype": "bf16"})");
  DataConfig c = DataConfig::from_json(j);
  EXPECT_EQ(c.source, "fashion_mnist");
  EXPECT_EQ(std::get<IdxOptions>(c.options).root, "/some/where");
  EXPECT_EQ(c.train_transforms.num_transforms(), 2u);
  EXPECT_EQ(c.val_transforms.num_transforms(), 0u);
  EXPECT_EQ(c.loader.batch_size, 32);
  EXPECT_EQ(c.loader.workers, 3);
  EXPECT_TRUE(c.loader.shuffle);  // default
  EXPECT_EQ(c.loader.prefetch, 5);  // "auto" by default: workers + 2
  auto val = c.loader_options(Split::val);
  EXPECT_FALSE(val.shuffle);
  EXPECT_FALSE(val.drop_last);
  EXPECT_EQ(val.batch_size, 100);
  EXPECT_EQ(val.dtype, "bf16");
  EXPECT_EQ(c.source_image_shape(), (ImageShape{28, 28, 1}));
  Json out = c.to_json();
  EXPECT_EQ(out["train_transforms"][0]["padding_mode"], "constant");  // defaults written out
  EXPECT_EQ(DataConfig::from_json(out).to_json(), out);
}

TEST(DataConfig, ErrorsNameThePathAndSuggest) {
  std::string m = config_error(Json{{"source", "fashion_mnist"}, {"root", "/r"}, {"workres", 2}});
  EXPECT_HAS(m, "unknown key data.workres (did you mean data.workers?)");
  // Every source's keys are accepted keys (each source refuses the others' by name, below), right after source.
  EXPECT_HAS(m, "accepted keys: source, root, synthetic, channels, max_image_pixels, val_labels, class_names_file, "
                "train_list, val_list, "
                "num_classes, train_transforms, val_transforms, batch_size");
  m = config_error(Json{{"source", "fashion_mnist"}, {"root", "/r"}, {"batch", 2}});
  EXPECT_HAS(m, "did you mean data.batch_size?");
  m = config_error(Json{{"source", "fashion-mnist"}, {"root", "/r"}});
  EXPECT_HAS(m, "data.source = \"fashion-mnist\" is not a data source (did you mean \"fashion_mnist\"?)");
  m = config_error(Json{{"sorce", "mnist"}, {"root", "/r"}});
  EXPECT_HAS(m, "data.source is required (found 'sorce': did you mean 'source'?)");
  m = config_error(Json{{"source", "mnist"}});
  EXPECT_HAS(m, "data.root is required");
  m = config_error(Json{{"source", "synthetic"}, {"root", "/r"}});
  EXPECT_HAS(m, "data.root: the synthetic source reads no files");
  m = config_error(Json{{"source", "cifar10"}, {"root", "/r"}, {"synthetic", {{"size", 3}}}});
  EXPECT_HAS(m, "data.synthetic: only used with source \"synthetic\"");
  m = config_error(Json{{"source", "synthetic"}, {"synthetic", {{"sise", 3}}}});
  EXPECT_HAS(m, "unknown key data.synthetic.sise (did you mean data.synthetic.size?)");
  m = config_error(Json{{"source", "mnist"}, {"root", "/r"}, {"workers", "two"}});
  EXPECT_HAS(m, "data.workers must be an integer or \"auto\", not a string \"two\"");
  m = config_error(Json{{"source", "mnist"}, {"root", "/r"}, {"batch_size", -1}});
  EXPECT_HAS(m, "data.batch_size: must be positive");
  m = config_error(Json{{"source", "mnist"}, {"root", "/r"}, {"dtype", "fp16"}});
  EXPECT_HAS(m, "data.dtype");
  m = config_error(Json::parse(R"({"source": "mnist", "root": "/r",
                               "train_transforms": [{"type": "horizontal_flip", "p": 0.5}, {"type": "random_crop", "sz": 3}]})"));
  EXPECT_HAS(m, "data.train_transforms[1].size is required");
  // Checked against the source's image shape without opening a file.
  m = config_error(Json::parse(R"({"source": "cifar10", "root": "/r",
                               "val_transforms": [{"type": "normalize", "mean": [0.5, 0.5], "std": [0.2, 0.2]}]})"));
  EXPECT_HAS(m, "data.val_transforms[0]: mean/std have 2 values but the images have 3 channels");
  m = config_error(Json::parse(R"({"source": "mnist", "root": "/r", "train_transforms": [{"type": "random_crop", "size": 32}]})"));
  EXPECT_HAS(m, "data.train_transforms[0]: random_crop: a 32x32 crop does not fit in a 28x28x1 image");
  m = config_error(Json::array());
  EXPECT_HAS(m, "data must be an object");
}

// Each source reads its own options (config.h: IdxOptions, ..., ImageListOptions) and refuses the
// keys of the other sources, naming the sources that take them.
TEST(DataConfig, EachSourceHasItsOptionsAndRefusesTheOthersKeys) {
  DataConfig c = DataConfig::from_json(Json{{"source", "cifar100"}, {"root", "/c"}});
  EXPECT_EQ(std::get<CifarOptions>(c.options).root, "/c");
  EXPECT_EQ(c.image_options().max_image_pixels, 89478485);  // not an image source: the defaults
  c = DataConfig::from_json(Json::parse(R"({"source": "image_list", "train_list": "t.txt", "val_list": "v.txt",
      "num_classes": 4, "channels": 1, "max_image_pixels": 100,
      "train_transforms": [{"type": "center_crop", "size": 8}],
      "val_transforms": [{"type": "center_crop", "size": 8}]})"));
  const auto& list = std::get<ImageListOptions>(c.options);
  EXPECT_EQ(list.train_list, "t.txt");
  EXPECT_EQ(list.val_list, "v.txt");
  EXPECT_EQ(list.num_classes, 4);
  EXPECT_EQ(c.image_options().channels, 1);
  EXPECT_EQ(c.image_options().max_image_pixels, 100);
  EXPECT_EQ(c.source_image_shape(), (ImageShape{0, 0, 1}));
  EXPECT_EQ(DataConfig::from_json(c.to_json()).to_json(), c.to_json());
  c = DataConfig::from_json(
      Json::parse(R"({"source": "synthetic", "synthetic": {"height": 5, "width": 7, "channels": 2}})"));
  EXPECT_EQ(std::get<SyntheticOptions>(c.options).width, 7);
  EXPECT_EQ(c.source_image_shape(), (ImageShape{5, 7, 2}));

  EXPECT_HAS(config_error(Json{{"source", "mnist"}, {"root", "/r"}, {"train_list", "t"}}),
             "data.train_list: only used with source \"image_list\", not \"mnist\"");
  EXPECT_HAS(config_error(Json{{"source", "image_folder"}, {"root", "/r"}, {"num_classes", 3}}),
             "data.num_classes: only used with source \"image_list\", not \"image_folder\"");
  EXPECT_HAS(config_error(Json{{"source", "synthetic"}, {"max_image_pixels", 3}}),
             "data.max_image_pixels: only used with the image_folder and image_list sources");
  EXPECT_HAS(config_error(Json{{"source", "image_list"}, {"train_list", "t"}, {"val_list", "v"}, {"root", "/r"}}),
             "data.root: the image_list source reads data.train_list and data.val_list; remove root");
  EXPECT_HAS(config_error(Json{{"source", "image_list"}, {"train_list", "t"}, {"val_list", "v"}, {"num_classes", 0}}),
             "data.num_classes: a positive number of classes");
  EXPECT_HAS(config_error(Json{{"source", "image_folder"}, {"root", ""}}), "data.root: empty folder name");
  EXPECT_HAS(config_error(Json{{"source", "image_folder"}}),
             "data.root is required: the folder of the image_folder files (holding train/<class>/<image>");
  EXPECT_HAS(config_error(Json{{"source", "image_folder"}, {"root", "/r"}, {"channels", 2}}),
             "data.channels: accepted: 1 (grey) or 3 (RGB), got 2");
  // A DataConfig built in code whose options are another source's: an error, not a crash.
  DataConfig wrong;
  wrong.source = "image_folder";
  EXPECT_HAS(kt::error_of([&] { wrong.source_image_shape(); }),
             "DataConfig: source \"image_folder\" with the options of another kind of source");
}

TEST(DataConfig, FactoryOpensEverySource) {
  kt::TempDir dir;
  // IDX files named as MNIST ships them.
  kt::write_bytes(dir.file("mnist/train-images-idx3-ubyte"), kt::idx_images(50, 28, 28));
  kt::write_bytes(dir.file("mnist/train-labels-idx1-ubyte"), kt::idx_labels(50));
  kt::write_bytes(dir.file("mnist/t10k-images-idx3-ubyte"), kt::idx_images(20, 28, 28));
  kt::write_bytes(dir.file("mnist/t10k-labels-idx1-ubyte"), kt::idx_labels(20));
  DataConfig c = DataConfig::from_json(Json{{"source", "mnist"}, {"root", dir.file("mnist")}, {"batch_size", 8},
                                            {"val_batch_size", 16}, {"workers", 1}});
  auto train = make_loader(c, Split::train);
  auto val = make_loader(c, Split::val);
  EXPECT_EQ(train->dataset().size(), 50);
  EXPECT_EQ(train->batches_per_epoch(), 7);
  EXPECT_EQ(val->dataset().size(), 20);
  EXPECT_EQ(val->batches_per_epoch(), 2);
  EXPECT_FALSE(val->options().shuffle);
  val->start_epoch(0);
  Batch b;
  ASSERT_TRUE(val->next(b));
  EXPECT_EQ(b.images.shape(), (Shape{16, 28, 28, 1}));
  EXPECT_EQ(b.indices[3], 3);
  // Sharded: this rank's half.
  auto half = make_loader(c, Split::train, Shard{1, 2});
  EXPECT_EQ(half->samples_per_epoch(), 25);

  // Missing files: the error names them.
  DataConfig missing = DataConfig::from_json(Json{{"source", "cifar100"}, {"root", dir.file("mnist")}});
  EXPECT_HAS(kt::error_of([&] { make_dataset(missing, Split::train); }), dir.file("mnist") + "/train.bin");

  DataConfig syn = DataConfig::from_json(Json::parse(R"({"source": "synthetic",
      "synthetic": {"size": 40, "height": 8, "width": 8, "channels": 3, "num_classes": 5},
      "train_transforms": [{"type": "random_crop", "size": 8, "padding": 1}], "batch_size": 10})"));
  auto st = make_dataset(syn, Split::train), sv = make_dataset(syn, Split::val);
  EXPECT_EQ(st->size(), 40);
  EXPECT_EQ(st->num_classes(), 5);
  EXPECT_NE(st->get(0).image.bytes, sv->get(0).image.bytes);  // the val split is another draw
}

TEST(DataConfig, BenchRunsOnSynthetic) {
  DataConfig c = DataConfig::from_json(Json::parse(R"({"source": "synthetic",
      "synthetic": {"size": 100, "height": 28, "width": 28, "channels": 1},
      "train_transforms": [{"type": "random_crop", "size": 28, "padding": 2}, {"type": "horizontal_flip"},
                           {"type": "normalize", "mean": 0.5, "std": 0.5}],
      "batch_size": 16, "workers": 2})"));
  DataBenchResult r = bench_data(c, 20, 2);  // crosses epochs: 7 batches each
  EXPECT_EQ(r.batches, 20);
  EXPECT_GT(r.images, 16 * 15);
  EXPECT_GT(r.seconds, 0.0);
  EXPECT_GT(r.images_per_second, 0.0);
  EXPECT_GE(r.wait_seconds, 0.0);
  EXPECT_LE(r.wait_seconds, r.seconds * 1.01 + 1e-3);
}
