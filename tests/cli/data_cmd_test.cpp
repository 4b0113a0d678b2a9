// `kiln data export` (tools/cli/data_cmd.cpp): a data source written as an image folder that reads
// back to the same samples and labels, a JPEG export with a limit, and an unknown format refused;
// the class folders named after the classes (Fashion-MNIST's, made safe) in the labels' order; an
// image too large to encode named by its source file (or dataset and index) and the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "data/config.h"
#include "data/dataset.h"
#include "data/image_decode.h"
#include "data/image_encode.h"
#include "data/image_folder.h"
#include "tests/data/data_test_util.h"
#include "tests/data/image_test_util.h"
#include "tools/cli/commands.h"

using namespace kiln;
namespace kt = kiln::testing;
namespace fs = std::filesystem;

TEST(DataExport, ImageFolderRoundTrip) {
  kt::TempDir dir;
  std::ofstream(dir.file("c.json")) << R"({"data": {"source": "synthetic",
      "synthetic": {"size": 40, "height": 6, "width": 5, "channels": 1, "num_classes": 12, "seed": 2}}})";
  ASSERT_EQ(cli::cmd_data({"export", dir.file("c.json"), "out=" + dir.file("out"), "split=both"}), 0);
  EXPECT_TRUE(fs::is_directory(dir.file("out/train/00")));
  DataConfig c = DataConfig::from_json(Json::parse(R"({"source": "synthetic",
      "synthetic": {"size": 40, "height": 6, "width": 5, "channels": 1, "num_classes": 12, "seed": 2}})"));
  for (Split split : {Split::train, Split::val}) {
    auto src = make_dataset(c, split);
    DecodeOptions d;
    d.channels = 1;
    auto back = ImageFileDataset::open_folder(dir.file("out/") + split_name(split), d, "back");
    ASSERT_EQ(back->size(), src->size());
    for (int64_t i = 0; i < back->size(); ++i) {
      // The file's name is the source index.
      const int64_t idx = std::stoll(fs::path(back->entry(i).path).stem().string());
      Sample a = src->get(idx), b = back->get(i);
      ASSERT_EQ(b.label, a.label) << back->entry(i).path;
      ASSERT_EQ(b.image.shape(), a.image.shape());
      ASSERT_TRUE(std::equal(a.image.data(), a.image.data() + a.image.numel(), b.image.data()));
    }
  }
  // JPEG with a limit: N evenly spaced samples.
  ASSERT_EQ(cli::cmd_data({"export", dir.file("c.json"), "out=" + dir.file("j"), "format=jpeg", "limit=8", "split=val"}), 0);
  int64_t files = 0;
  for (auto& e : fs::recursive_directory_iterator(dir.file("j/val"))) files += e.is_regular_file();
  EXPECT_EQ(files, 8);
  EXPECT_HAS(kt::error_of([&] { cli::cmd_data({"export", dir.file("c.json"), "format=gif", "out=x"}); }), "format");
}

namespace {

// The class folders of `dir`, sorted (ImageFolder's order).
std::vector<std::string> folders_of(const std::string& dir) { return ImageFileDataset::class_folders(dir); }

// Every image read back from `folder` has its source sample's label and pixels (the file name is the index).
void expect_same_samples(const Dataset& src, const std::string& folder, int channels) {
  DecodeOptions d;
  d.channels = channels;
  auto back = ImageFileDataset::open_folder(folder, d, "back");
  ASSERT_EQ(back->size(), src.size());
  for (int64_t i = 0; i < back->size(); ++i) {
    const int64_t idx = std::stoll(fs::path(back->entry(i).path).stem().string());
    Sample a = src.get(idx), b = back->get(i);
    ASSERT_EQ(b.label, a.label) << back->entry(i).path;
    ASSERT_TRUE(std::equal(a.image.data(), a.image.data() + a.image.numel(), b.image.data())) << back->entry(i).path;
  }
}

}  // namespace

// Fashion-MNIST's names are not in alphabetical order: each folder is the label, then the name with
// '/' made '_', so that ImageFolder's sorted order keeps label i at i.
TEST(DataExport, ClassFoldersAreTheClassNamesInLabelOrder) {
  kt::TempDir dir;
  fs::create_directories(dir.file("fm"));
  kt::write_bytes(dir.file("fm/train-images-idx3-ubyte"), kt::idx_images(30, 4, 3));
  kt::write_bytes(dir.file("fm/train-labels-idx1-ubyte"), kt::idx_labels(30));
  kt::write_bytes(dir.file("fm/t10k-images-idx3-ubyte"), kt::idx_images(20, 4, 3));
  kt::write_bytes(dir.file("fm/t10k-labels-idx1-ubyte"), kt::idx_labels(20));
  std::ofstream(dir.file("fm.json")) << R"({"data": {"source": "fashion_mnist", "root": ")" + dir.file("fm") + R"("}})";
  ASSERT_EQ(cli::cmd_data({"export", dir.file("fm.json"), "out=" + dir.file("out")}), 0);
  const std::vector<std::string> want = {"0_T-shirt_top", "1_Trouser", "2_Pullover", "3_Dress",   "4_Coat",
                                         "5_Sandal",      "6_Shirt",   "7_Sneaker",  "8_Bag",     "9_Ankle boot"};
  DataConfig c = DataConfig::from_json(Json::parse(R"({"source": "fashion_mnist", "root": ")" + dir.file("fm") + R"("})"));
  for (Split split : {Split::train, Split::val}) {
    SCOPED_TRACE(split_name(split));
    const std::string folder = dir.file("out/") + split_name(split);
    EXPECT_EQ(folders_of(folder), want);
    DecodeOptions d;
    d.channels = 1;
    EXPECT_EQ(ImageFileDataset::open_folder(folder, d, "back")->class_names(), want);  // label i is folder i
    expect_same_samples(*make_dataset(c, split), folder, 1);
  }
}

// Names already in sorted order (CIFAR-10's are) are the folders as they are, so reading the export
// back gives the very names; unsafe characters are replaced.
TEST(DataExport, SortedClassNamesAreTheFoldersAsTheyAre) {
  kt::TempDir dir;
  std::ofstream list(dir.file("list.txt"));
  list << "# classes: [\"airplane\", \"bird/fowl\", \"cat\"]\n";
  for (int i = 0; i < 6; ++i) {
    std::vector<uint8_t> px(4 * 4 * 3, static_cast<uint8_t>(40 * i));
    write_file(dir.file(std::to_string(i) + ".png"), encode_png(px.data(), 4, 4, 3));
    list << i << ".png " << (i % 3) << "\n";
  }
  list.close();
  const std::string cfg = R"({"data": {"source": "image_list", "channels": 3, "train_list": ")" + dir.file("list.txt") +
                          R"(", "val_list": ")" + dir.file("list.txt") + R"("}})";
  std::ofstream(dir.file("c.json")) << cfg;
  ASSERT_EQ(cli::cmd_data({"export", dir.file("c.json"), "out=" + dir.file("out"), "split=train"}), 0);
  const std::vector<std::string> want = {"airplane", "bird_fowl", "cat"};
  EXPECT_EQ(folders_of(dir.file("out/train")), want);
  DecodeOptions d;
  d.channels = 3;
  EXPECT_EQ(ImageFileDataset::open_folder(dir.file("out/train"), d, "back")->class_names(), want);
  expect_same_samples(*make_dataset(DataConfig::from_json(Json::parse(cfg)["data"], "data", false), Split::train), dir.file("out/train"), 3);
}

// An image the encoders refuse (over 65500 pixels a side): the error names the sample's source file,
// or the dataset and index for a source without files, and the output file not written.
TEST(DataExport, AnImageTooLargeToEncodeNamesItsSource) {
  kt::TempDir dir;
  kt::write_bytes(dir.file("in/train/a/wide.png"), kt::grey_png(70000, 1));
  std::string e = kt::error_of([&] { cli::cmd_data({"export", dir.file("in"), "out=" + dir.file("out"), "split=train"}); });
  EXPECT_HAS(e, dir.file("in/train/a/wide.png") + " (sample 0 of image_folder train (" + dir.file("in/train") + ")): "
                "cannot encode a 70000x1 image; accepted: 1..65500 pixels a side");
  EXPECT_HAS(e, dir.file("out/train/a/0.png") + " not written");
  e = kt::error_of([&] {
    cli::cmd_data({"export", dir.file("in"), "out=" + dir.file("out"), "split=train", "format=jpeg"});
  });
  EXPECT_HAS(e, dir.file("in/train/a/wide.png") + " (sample 0 of image_folder train");
  std::ofstream(dir.file("s.json")) << R"({"data": {"source": "synthetic",
      "synthetic": {"size": 2, "height": 1, "width": 70000, "channels": 1, "num_classes": 2}}})";
  e = kt::error_of([&] { cli::cmd_data({"export", dir.file("s.json"), "out=" + dir.file("s"), "split=train"}); });
  EXPECT_HAS(e, "synthetic");
  EXPECT_HAS(e, ": sample 0: cannot encode a 70000x1 image");
  EXPECT_HAS(e, " not written");
}
