// `kiln data imagenet-like` (data/imagenet_like.h): the ImageNet-shaped folder the GPU check's e2e
// part trains from. It must read back through the Kaggle layout's keys (data.val_labels,
// data.class_names_file) with every file a JPEG of one of ImageNet's sizes, be the same bytes for the
// same seed whatever the thread count, and refuse what would lose data or could not work.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "../expect_error.h"
#include "data/config.h"
#include "data/image_folder.h"
#include "data/image_header.h"
#include "data/imagenet_like.h"
#include "data_test_util.h"
#include "image_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;
namespace fs = std::filesystem;

namespace {

// Two photos (a colour PNG and a grey JPEG) in dir/photos, as the kit carries real ones.
std::string write_photos(const kt::TempDir& dir) {
  const std::string photos = dir.file("photos");
  fs::create_directories(photos);
  kt::write_bytes(photos + "/a.png", kt::encode(kt::pattern_rgb(120, 160, 1), ".png"));
  kt::write_bytes(photos + "/b.jpg", kt::encode(kt::to_grey(kt::pattern_rgb(90, 70, 2)), ".jpg"));
  std::ofstream(photos + "/notes.txt") << "not a photo";
  return photos;
}

const ImageFileDataset& files_of(const Dataset& d) { return dynamic_cast<const ImageFileDataset&>(d); }

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

ImageNetLikeOptions small(const std::string& photos, const std::string& out) {
  ImageNetLikeOptions o;
  o.photos = photos;
  o.out = out;
  o.classes = 3;
  o.train_per_class = 4;
  o.val_per_class = 2;
  o.threads = 2;
  return o;
}

}  // namespace

TEST(ImageNetLike, WritesTheKaggleLayoutThatTheImageNetKeysRead) {
  kt::TempDir dir;
  const std::string out = dir.file("inl");
  const ImageNetLikeReport r = make_imagenet_like(small(write_photos(dir), out));
  EXPECT_EQ(r.train_files, 12);
  EXPECT_EQ(r.val_files, 6);
  EXPECT_EQ(r.photos, 2) << "notes.txt is not a photo";
  int64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.path().extension() == ".JPEG") bytes += static_cast<int64_t>(e.file_size());
  EXPECT_EQ(r.bytes, bytes);

  const DataConfig c = DataConfig::from_json(Json::parse(
      R"({"source": "image_folder", "root": ")" + out + R"(/ILSVRC/Data/CLS-LOC", "val_labels": ")" + out +
      R"(/LOC_val_solution.csv", "class_names_file": ")" + out + R"(/LOC_synset_mapping.txt",
      "train_transforms": [{"type": "random_resized_crop", "size": 8}],
      "val_transforms": [{"type": "center_crop", "size": 8}]})"));
  auto train = make_dataset(c, Split::train), val = make_dataset(c, Split::val);
  ASSERT_EQ(train->size(), 12);
  ASSERT_EQ(val->size(), 6);
  EXPECT_EQ(train->num_classes(), 3);
  EXPECT_EQ(train->class_names(), (std::vector<std::string>{"class 0", "class 1", "class 2"}));
  std::vector<int64_t> per_class(3, 0);
  for (int64_t i = 0; i < val->size(); ++i) ++per_class[static_cast<size_t>(val->get(i).label)];
  EXPECT_EQ(per_class, (std::vector<int64_t>{2, 2, 2})) << "val_per_class of each class, by the CSV";
  const std::set<std::pair<int64_t, int64_t>> sizes = {{375, 500}, {500, 375}, {333, 500}, {500, 333},
                                                       {500, 500}, {480, 640}, {300, 400}, {600, 800}};
  for (auto* d : {train.get(), val.get()}) {
    for (int64_t i = 0; i < d->size(); ++i) {
      const std::string path = files_of(*d).entry(i).path;
      const std::vector<uint8_t> bytes = read_all(path);
      const ImageHeader h = read_image_header(bytes.data(), bytes.size(), path);
      EXPECT_EQ(h.format, ImageFormat::jpeg) << path;
      EXPECT_TRUE(sizes.count({h.height, h.width})) << path << ": " << h.width << "x" << h.height;
      Sample s;
      d->get_into(i, s);  // decodes, in colour
      EXPECT_EQ(s.image.c, 3);
    }
  }
  EXPECT_EQ(imagenet_like_wnid(0), "n01440764");
  EXPECT_TRUE(fs::is_directory(out + "/ILSVRC/Data/CLS-LOC/train/" + imagenet_like_wnid(2)));
}

TEST(ImageNetLike, SameBytesForTheSameSeedWhateverTheThreads) {
  kt::TempDir dir;
  const std::string photos = write_photos(dir);
  ImageNetLikeOptions a = small(photos, dir.file("a")), b = small(photos, dir.file("b")), c = small(photos, dir.file("c"));
  b.threads = 1;
  c.seed = 7;
  make_imagenet_like(a);
  make_imagenet_like(b);
  make_imagenet_like(c);
  const std::string f = "/ILSVRC/Data/CLS-LOC/train/" + imagenet_like_wnid(1) + "/" + imagenet_like_wnid(1) + "_3.JPEG";
  EXPECT_EQ(read_all(a.out + f), read_all(b.out + f));
  EXPECT_NE(read_all(a.out + f), read_all(c.out + f)) << "another seed, other images";
  EXPECT_EQ(read_all(a.out + "/LOC_val_solution.csv"), read_all(b.out + "/LOC_val_solution.csv"));
}

TEST(ImageNetLike, RefusesWhatWouldLoseDataOrCannotWork) {
  kt::TempDir dir;
  const std::string photos = write_photos(dir);
  // A folder that holds something is never written into.
  fs::create_directories(dir.file("used"));
  std::ofstream(dir.file("used/keep.txt")) << "keep";
  kt::expect_error([&] { make_imagenet_like(small(photos, dir.file("used"))); }, {"is not an empty folder"});
  EXPECT_TRUE(fs::exists(dir.file("used/keep.txt")));
  // No photos, a damaged photo, bad numbers.
  fs::create_directories(dir.file("none"));
  kt::expect_error([&] { make_imagenet_like(small(dir.file("none"), dir.file("o1"))); }, {"holds no image file"});
  kt::expect_error([&] { make_imagenet_like(small(dir.file("missing"), dir.file("o2"))); }, {"not a folder"});
  fs::create_directories(dir.file("bad"));
  kt::write_bytes(dir.file("bad/x.png"), {0x89, 'P', 'N', 'G', 1, 2, 3});
  kt::expect_error([&] { make_imagenet_like(small(dir.file("bad"), dir.file("o3"))); }, {"x.png"});
  ImageNetLikeOptions o = small(photos, dir.file("o4"));
  o.classes = 0;
  kt::expect_error([&] { make_imagenet_like(o); }, {"classes=0 is out of range"});
  o = small(photos, dir.file("o4"));
  o.quality = 101;
  kt::expect_error([&] { make_imagenet_like(o); }, {"quality=101"});
  o = small(photos, dir.file("o4"));
  o.grain = -1;
  kt::expect_error([&] { make_imagenet_like(o); }, {"grain=-1"});
}
