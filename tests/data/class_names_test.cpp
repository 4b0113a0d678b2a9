// Dataset::class_names() of every source: numbers by default (synthetic, MNIST), Fashion-MNIST's and
// CIFAR's names (from the CIFAR meta files when present), image folders' class folders (val/ with
// train/'s), and a list file's "# classes:" line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "data/cifar.h"
#include "data/config.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/synthetic.h"
#include "data_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;
using kt::TempDir;

namespace {
using Names = std::vector<std::string>;

void write_idx_pair(const TempDir& dir, const std::string& prefix, uint32_t n) {
  kt::write_bytes(dir.file(prefix + "-images-idx3-ubyte"), kt::idx_images(n, 4, 4));
  kt::write_bytes(dir.file(prefix + "-labels-idx1-ubyte"), kt::idx_labels(n));
}

// n CIFAR records of zero pixels, labels 0, 1, 2, ...
std::vector<uint8_t> records(int n, bool hundred) {
  std::vector<uint8_t> b;
  for (int i = 0; i < n; ++i) {
    if (hundred) b.push_back(0);
    b.push_back(static_cast<uint8_t>(i));
    b.resize(b.size() + 3072, 0);
  }
  return b;
}

// Names only: ImageFileDataset reads no pixels when it opens.
void touch(const std::string& path) { kt::write_bytes(path, {'x'}); }
}  // namespace

TEST(ClassNames, SyntheticAndMnistAreNumbers) {
  SyntheticOptions o;
  o.num_classes = 3;
  EXPECT_EQ(SyntheticDataset(o).class_names(), (Names{"0", "1", "2"}));
  EXPECT_EQ(numbered_class_names(12).back(), "11");
  TempDir dir;
  write_idx_pair(dir, "train", 10);
  EXPECT_EQ(IdxDataset::open(dir.str(), Split::train, "mnist")->class_names(),
            (Names{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));
}

TEST(ClassNames, FashionMnistHasZalandosNames) {
  TempDir dir;
  write_idx_pair(dir, "t10k", 10);
  const Names want = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  EXPECT_EQ(IdxDataset::open(dir.str(), Split::val, "fashion_mnist")->class_names(), want);
  // Through the data config, as the trainer opens it.
  DataConfig c = DataConfig::from_json(Json{{"source", "fashion_mnist"}, {"root", dir.str()}});
  EXPECT_EQ(make_dataset(c, Split::val)->class_names(), want);
}

TEST(ClassNames, Cifar10KnownListOrTheMetaFile) {
  TempDir dir;
  const std::string sub = dir.file("cifar-10-batches-bin");
  kt::write_bytes(sub + "/test_batch.bin", records(3, false));
  const Names known = {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  EXPECT_EQ(CifarDataset::open(CifarKind::cifar10, dir.str(), Split::val)->class_names(), known);
  // The archive's batches.meta.txt (one name a line, a blank line at the end) is read when present.
  std::ofstream(sub + "/batches.meta.txt") << "Airplane\nCar\r\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";
  Names meta = CifarDataset::open(CifarKind::cifar10, dir.str(), Split::val)->class_names();
  ASSERT_EQ(meta.size(), 10u);
  EXPECT_EQ(meta[0], "Airplane");
  EXPECT_EQ(meta[1], "Car");
  EXPECT_EQ(meta[9], "truck");
  // A meta file of another length is not CIFAR-10's: the known list.
  std::ofstream(sub + "/batches.meta.txt") << "a\nb\n";
  EXPECT_EQ(CifarDataset::open(CifarKind::cifar10, dir.str(), Split::val)->class_names(), known);
}

TEST(ClassNames, Cifar100FineLabelNames) {
  TempDir dir;
  kt::write_bytes(dir.file("test.bin"), records(4, true));
  Names names = CifarDataset::open(CifarKind::cifar100, dir.str(), Split::val)->class_names();
  ASSERT_EQ(names.size(), 100u);
  EXPECT_EQ(names[0], "apple");
  EXPECT_EQ(names[1], "aquarium_fish");
  EXPECT_EQ(names[58], "pickup_truck");
  EXPECT_EQ(names[99], "worm");
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));  // CIFAR-100 numbers its fine labels alphabetically
  std::ofstream meta(dir.file("fine_label_names.txt"));
  for (int i = 0; i < 100; ++i) meta << "fine" << i << "\n";
  meta.close();
  names = CifarDataset::open(CifarKind::cifar100, dir.str(), Split::val)->class_names();
  EXPECT_EQ(names[0], "fine0");
  EXPECT_EQ(names[99], "fine99");
}

TEST(ClassNames, ImageFolderClassFoldersValUsesTrains) {
  TempDir dir;
  for (const char* c : {"cat", "ant", "bee"}) touch(dir.file(std::string("train/") + c + "/0.png"));
  touch(dir.file("val/cat/0.png"));
  DataConfig c = DataConfig::from_json(Json::parse(R"({"source": "image_folder", "root": ")" + dir.str() +
                                                   R"(", "val_transforms": [{"type": "center_crop", "size": 4}],
                                                   "train_transforms": [{"type": "center_crop", "size": 4}]})"));
  EXPECT_EQ(make_dataset(c, Split::train)->class_names(), (Names{"ant", "bee", "cat"}));
  EXPECT_EQ(make_dataset(c, Split::val)->class_names(), (Names{"ant", "bee", "cat"}));
}

TEST(ClassNames, ListFileClassesLine) {
  TempDir dir;
  std::ofstream(dir.file("list.txt")) << "# a comment\n# classes: [\"cat\", \"dog\", \"emu\"]\nimg/0.png 2\nimg/1.png 0\n";
  auto ds = ImageFileDataset::open_list(dir.file("list.txt"), 0, {}, "t");
  EXPECT_EQ(ds->num_classes(), 3);  // the named classes, not 1 + the largest label
  EXPECT_EQ(ds->class_names(), (Names{"cat", "dog", "emu"}));
  EXPECT_EQ(ImageFileDataset::open_list(dir.file("list.txt"), 3, {}, "t")->class_names(), (Names{"cat", "dog", "emu"}));

  std::ofstream(dir.file("plain.txt")) << "img/0.png 1\n";
  EXPECT_EQ(ImageFileDataset::open_list(dir.file("plain.txt"), 0, {}, "t")->class_names(), (Names{"0", "1"}));

  auto err = [&](const std::string& text, int64_t k = 0) {
    std::ofstream(dir.file("bad.txt")) << text;
    return kt::error_of([&] { ImageFileDataset::open_list(dir.file("bad.txt"), k, {}, "t"); });
  };
  EXPECT_HAS(err("# classes: [\"a\", \"b\"]\nimg/0.png 2\n"),
             "bad.txt:2: label 2 is out of range; accepted: 0 .. 1 (the \"# classes:\" line names 2)");
  EXPECT_HAS(err("# classes: [\"a\", \"b\"]\nimg/0.png 1\n", 3),
             "bad.txt: its \"# classes:\" line names 2 classes but data.num_classes = 3");
  EXPECT_HAS(err("# classes: cat, dog\nimg/0.png 1\n"),
             "bad.txt:1: expected # classes: followed by a JSON list of class names");
  EXPECT_HAS(err("# classes: [\"a\", 3]\nimg/0.png 1\n"), "bad.txt:1: expected # classes:");
  EXPECT_HAS(err("# classes: [\"a\"]\n# classes: [\"b\"]\nimg/0.png 0\n"), "bad.txt:2: a second \"# classes:\" line");
}

TEST(ClassNames, ListWithoutLabelsForPredict) {
  TempDir dir;
  std::ofstream(dir.file("in.txt")) << "a.png\nsub dir/b c.JPG\nc.png 3\n/abs/d.webp\n";
  ImageList l = read_image_list(dir.file("in.txt"), /*labels=*/false);
  ASSERT_EQ(l.entries.size(), 4u);
  EXPECT_EQ(l.entries[0].path, dir.file("a.png"));
  EXPECT_EQ(l.entries[0].label, -1);
  EXPECT_EQ(l.entries[1].path, dir.file("sub dir/b c.JPG"));
  EXPECT_EQ(l.entries[2].path, dir.file("c.png"));
  EXPECT_EQ(l.entries[2].label, 3);
  EXPECT_EQ(l.entries[3].path, "/abs/d.webp");
  EXPECT_EQ(l.lines, (std::vector<int64_t>{1, 2, 3, 4}));
  // A training list still needs its labels.
  EXPECT_HAS(kt::error_of([&] { read_image_list(dir.file("in.txt")); }), "in.txt:1: expected \"<path> <label>\"");
  std::ofstream(dir.file("bad.txt")) << "notes.doc\n";
  EXPECT_HAS(kt::error_of([&] { read_image_list(dir.file("bad.txt"), false); }),
             "bad.txt:1: expected \"<path> <label>\" or an image path, got \"notes.doc\"");
}
