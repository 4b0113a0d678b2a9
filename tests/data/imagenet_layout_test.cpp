// ImageNet as downloaded (Kaggle's imagenet-object-localization-challenge layout; docs/data.md,
// "ImageNet as downloaded"): a tiny tree written here with kiln's encoders, ILSVRC/Data/CLS-LOC/train/
// <wnid>/<wnid>_<n>.JPEG, a flat val/ of ILSVRC2012_val_<n>.JPEG labelled by LOC_val_solution.csv
// (data.val_labels, boxes after the wnid) and class names from LOC_synset_mapping.txt
// (data.class_names_file): labels, names, and each error naming its file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/config.h"
#include "data/image_folder.h"
#include "data_test_util.h"
#include "image_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;
namespace fs = std::filesystem;

namespace {
using Names = std::vector<std::string>;

// The Kaggle tree under dir: 3 wnid folders of train images (JPEG and PNG bytes, some named .JPEG),
// 5 val images, the labels CSV (rows out of file order, boxes, a CRLF line) and the synset file (with
// a line for a class the tree lacks, as a subset of ImageNet would have).
struct KaggleTree {
  kt::TempDir dir;
  std::string data = dir.file("ILSVRC/Data/CLS-LOC"), csv = dir.file("LOC_val_solution.csv"),
              synsets = dir.file("LOC_synset_mapping.txt");

  KaggleTree() {
    int seed = 0;
    auto image = [&](const std::string& path, const std::string& format) {
      kt::write_bytes(data + "/" + path, kt::encode(kt::pattern_rgb(6 + seed % 3, 7, seed), format));
      ++seed;
    };
    image("train/n01484850/n01484850_1.JPEG", ".jpg");
    image("train/n01440764/n01440764_10026.JPEG", ".jpg");
    image("train/n01440764/n01440764_10027.JPEG", ".png");  // the format is read from the bytes
    image("train/n01443537/n01443537_2.png", ".png");
    image("train/n01443537/n01443537_3.jpg", ".jpg");
    for (int i = 1; i <= 5; ++i) image("val/ILSVRC2012_val_0000000" + std::to_string(i) + ".JPEG", i % 2 ? ".jpg" : ".png");
    std::ofstream(data + "/val/README.txt") << "not an image: ignored\n";
    std::ofstream(csv) << "ImageId,PredictionString\n"
                          "ILSVRC2012_val_00000003,n01484850 255 142 454 329 n01484850 44 21 322 295 \n"
                          "ILSVRC2012_val_00000001,n01443537 10 20 30 40\r\n"
                          "ILSVRC2012_val_00000005,n01440764 1 2 3 4\n"
                          "ILSVRC2012_val_00000002,n01440764 1 2 3 4 n01440764 5 6 7 8\n"
                          "ILSVRC2012_val_00000004,n01484850 1 2 3 4\n";
    std::ofstream(synsets) << "n01440764 tench, Tinca tinca\n"
                              "n01443537 goldfish, Carassius auratus\n"
                              "n01444339 extra class, not a folder of this tree\n"
                              "n01484850 great white shark, white shark, man-eater, man-eating shark, Carcharodon carcharias\n";
  }

  Json data_json(const std::string& extra = "") const {
    return Json::parse(R"({"source": "image_folder", "root": ")" + data + R"(", "val_labels": ")" + csv +
                       R"(", "class_names_file": ")" + synsets + R"(",
      "train_transforms": [{"type": "random_resized_crop", "size": 4}],
      "val_transforms": [{"type": "resize", "size": 5}, {"type": "center_crop", "size": 4}])" + extra + "}");
  }
  DataConfig config() const { return DataConfig::from_json(data_json()); }
};

Json with(Json j, const std::string& key, const std::string& value) {
  j[key] = value;
  return j;
}

const ImageFileDataset& files_of(const std::shared_ptr<const Dataset>& d) {
  return dynamic_cast<const ImageFileDataset&>(*d);
}

std::vector<int64_t> labels_of(const ImageFileDataset& d) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < d.size(); ++i) out.push_back(d.entry(i).label);
  return out;
}

Names file_names(const ImageFileDataset& d) {
  Names out;
  for (int64_t i = 0; i < d.size(); ++i) out.push_back(fs::path(d.entry(i).path).filename().string());
  return out;
}
}  // namespace

TEST(ImageNetLayout, ValLabelsFromTheCsvAndNamesFromTheSynsetFile) {
  KaggleTree t;
  const DataConfig c = t.config();
  auto train = make_dataset(c, Split::train), val = make_dataset(c, Split::val);
  const Names wnids = {"n01440764", "n01443537", "n01484850"};
  const Names names = {"tench", "goldfish", "great white shark"};
  EXPECT_EQ(files_of(train).classes(), wnids);  // labels are the sorted folders' ranks, as before
  EXPECT_EQ(train->class_names(), names);       // what classes.json and kiln predict show
  EXPECT_EQ(val->class_names(), names);
  EXPECT_EQ(val->num_classes(), 3);
  ASSERT_EQ(train->size(), 5);
  EXPECT_EQ(labels_of(files_of(train)), (std::vector<int64_t>{0, 0, 1, 1, 2}));
  ASSERT_EQ(val->size(), 5);  // by file name; README.txt is not an image
  EXPECT_EQ(file_names(files_of(val)), (Names{"ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000002.JPEG",
                                              "ILSVRC2012_val_00000003.JPEG", "ILSVRC2012_val_00000004.JPEG",
                                              "ILSVRC2012_val_00000005.JPEG"}));
  EXPECT_EQ(labels_of(files_of(val)), (std::vector<int64_t>{1, 0, 2, 2, 0}));
  EXPECT_EQ(files_of(val).entry(0).path, t.data + "/val/ILSVRC2012_val_00000001.JPEG");
  for (int64_t i = 0; i < val->size(); ++i) {  // the images decode, with the CSV's label
    Sample s = val->get(i);
    EXPECT_EQ(s.label, labels_of(files_of(val))[static_cast<size_t>(i)]);
    EXPECT_EQ(s.image.shape(), (ImageShape{6 + (5 + i) % 3, 7, 3})) << i;
  }
  // Written out and read back (a run's config.json), the keys stay.
  Json out = c.to_json();
  EXPECT_EQ(out["val_labels"], t.csv);
  EXPECT_EQ(out["class_names_file"], t.synsets);
  EXPECT_EQ(DataConfig::from_json(out).to_json(), out);
  // Without the keys: the folder names, and val/ read as val/<class>/<image> (it has no class folders).
  DataConfig plain = DataConfig::from_json(Json::parse(R"({"source": "image_folder", "root": ")" + t.data + R"(",
      "train_transforms": [{"type": "random_resized_crop", "size": 4}],
      "val_transforms": [{"type": "center_crop", "size": 4}]})"));
  EXPECT_EQ(make_dataset(plain, Split::train)->class_names(), wnids);
  EXPECT_FALSE(plain.to_json().contains("val_labels"));
  EXPECT_HAS(kt::error_of([&] { make_dataset(plain, Split::val); }), "holds no class folders");
  // A held-out split keeps the names (both parts are the training files).
  DataConfig held = DataConfig::from_json(t.data_json(R"(, "holdout": 2)"));
  EXPECT_EQ(make_dataset(held, Split::val)->class_names(), names);
}

// The index holds each path once, relative to the split's folder, plus 12 bytes: no std::string per file.
TEST(ImageNetLayout, IndexIsPacked) {
  KaggleTree t;
  auto train = make_dataset(t.config(), Split::train);
  const auto& f = files_of(train);
  size_t rest = 0;
  for (int64_t i = 0; i < f.size(); ++i) rest += f.entry(i).path.size() - (t.data + "/train/").size();
  EXPECT_LE(f.index_bytes(), rest + 12 * static_cast<size_t>(f.size()) + 64 + (t.data + "/train/").size());
  EXPECT_GE(f.index_bytes(), rest + 12 * static_cast<size_t>(f.size()));
}

TEST(ImageNetLayout, CsvErrorsNameTheFileAndLine) {
  KaggleTree t;
  const DataConfig c = t.config();
  auto val_error = [&](const std::string& csv_text) {
    std::ofstream(t.csv) << csv_text;
    return kt::error_of([&] { make_dataset(c, Split::val); });
  };
  const std::string ok = "ILSVRC2012_val_00000001,n01443537 1 2 3 4\nILSVRC2012_val_00000002,n01440764\n"
                         "ILSVRC2012_val_00000003,n01484850\nILSVRC2012_val_00000004,n01484850\n";
  EXPECT_EQ(val_error(ok + "ILSVRC2012_val_00000005,n01440764\n"), "");  // no header is fine too
  EXPECT_HAS(val_error("ImageId,PredictionString\n" + ok + "ILSVRC2012_val_00000005 n01440764\n"),
             t.csv + ":6: expected \"<image id>,<wnid> ...\"");
  EXPECT_HAS(val_error(ok + "ILSVRC2012_val_00000005,\n"), t.csv + ":5: expected \"<image id>,<wnid> ...\"");
  std::string e = val_error(ok + "ILSVRC2012_val_00000005,n09999999 1 2 3 4\n");
  EXPECT_HAS(e, t.csv + ":5: class n09999999 of image ILSVRC2012_val_00000005 is not one of the 3 class folders "
                "of the training split (n01440764 ... n01484850)");
  EXPECT_HAS(val_error(ok + "ILSVRC2012_val_00000002,n01440764\n"),
             t.csv + ":5: image ILSVRC2012_val_00000002 is listed a second time (first on line 2)");
  // Listed but missing, counted with the first ones named by file:line.
  e = val_error(ok + "ILSVRC2012_val_00000005,n01440764\nILSVRC2012_val_00000009,n01440764\n"
                     "ILSVRC2012_val_00000010,n01440764\n");
  EXPECT_HAS(e, "2 image(s) listed in " + t.csv + " are not in " + t.data + "/val");
  EXPECT_HAS(e, t.csv + ":6 ILSVRC2012_val_00000009, " + t.csv + ":7 ILSVRC2012_val_00000010");
  // In the folder but not listed.
  e = val_error(ok);
  EXPECT_HAS(e, "1 image(s) of " + t.data + "/val are not listed in " + t.csv + ": ILSVRC2012_val_00000005.JPEG");
  EXPECT_HAS(kt::error_of([&] {
               DataConfig d = DataConfig::from_json(with(t.data_json(), "val_labels", t.dir.file("none.csv")));
               make_dataset(d, Split::val);
             }),
             "cannot open the labels file " + t.dir.file("none.csv"));
  // Two images of one id.
  std::ofstream(t.csv) << ok << "ILSVRC2012_val_00000005,n01440764\n";
  kt::write_bytes(t.data + "/val/ILSVRC2012_val_00000005.png", kt::encode(kt::pattern_rgb(4, 4, 0), ".png"));
  EXPECT_HAS(kt::error_of([&] { make_dataset(c, Split::val); }),
             "two images of id ILSVRC2012_val_00000005 in " + t.data + "/val: ILSVRC2012_val_00000005.JPEG and "
             "ILSVRC2012_val_00000005.png");
  // A val/ of class folders with val_labels set.
  fs::remove_all(t.data + "/val");
  kt::write_bytes(t.data + "/val/n01440764/a.JPEG", kt::encode(kt::pattern_rgb(4, 4, 0), ".jpg"));
  e = kt::error_of([&] { make_dataset(c, Split::val); });
  EXPECT_HAS(e, t.data + "/val holds no images");
  EXPECT_HAS(e, "it holds 1 sub-folders: for val/<class>/<image> leave out data.val_labels");
}

TEST(ImageNetLayout, SynsetErrorsNameTheFileAndLine) {
  KaggleTree t;
  const DataConfig c = t.config();
  auto names_error = [&](const std::string& text) {
    std::ofstream(t.synsets) << text;
    return kt::error_of([&] { make_dataset(c, Split::train); });
  };
  const std::string two = "n01440764 tench, Tinca tinca\r\n\nn01443537\tgoldfish\n";
  EXPECT_EQ(names_error(two + "n01484850 great white shark\n"), "");
  EXPECT_HAS(names_error(two + "n01484850\n"), t.synsets + ":4: expected \"<wnid> <name>[, <name> ...]\"");
  EXPECT_HAS(names_error(two + "n01484850 , shark\n"), t.synsets + ":4: expected");
  EXPECT_HAS(names_error(two + "n01443537 goldfish again\n"),
             t.synsets + ":4: a second line for n01443537 (the first is line 3)");
  std::string e = names_error("n01443537 goldfish\n");
  EXPECT_HAS(e, t.synsets + ": no line for 2 of the 3 class folders: n01440764, n01484850");
  EXPECT_HAS(kt::error_of([&] {
               make_dataset(DataConfig::from_json(with(t.data_json(), "class_names_file", t.dir.file("x.txt"))),
                            Split::train);
             }),
             "cannot open the class names file " + t.dir.file("x.txt"));
}

TEST(ImageNetLayout, KeysBelongToImageFolder) {
  KaggleTree t;
  auto config_error = [](const Json& j) { return kt::error_of([&] { DataConfig::from_json(j); }); };
  // "" turns a key off (`kiln train configs/imagenet_resnet50.json data.val_labels=` for val/<class>/<image>).
  DataConfig off = DataConfig::from_json(with(with(t.data_json(), "val_labels", ""), "class_names_file", ""));
  EXPECT_FALSE(off.to_json().contains("val_labels"));
  EXPECT_FALSE(off.to_json().contains("class_names_file"));
  EXPECT_EQ(make_dataset(off, Split::train)->class_names(), (Names{"n01440764", "n01443537", "n01484850"}));
  EXPECT_HAS(kt::error_of([&] { make_dataset(off, Split::val); }), "holds no class folders");
  EXPECT_HAS(config_error(Json{{"source", "cifar10"}, {"root", "/r"}, {"val_labels", "x.csv"}}),
             "data.val_labels: only used with source \"image_folder\", not \"cifar10\"");
  EXPECT_HAS(config_error(Json{{"source", "image_list"}, {"train_list", "a"}, {"val_list", "b"},
                               {"class_names_file", "x.txt"}}),
             "data.class_names_file: only used with source \"image_folder\"");
}

// configs/imagenet_*.json name the Kaggle download's files under data/imagenet; pointed at this
// tree, their data sections open it.
TEST(ImageNetLayout, ConfigsShowTheKaggleLayout) {
  KaggleTree t;
  for (const char* name : {"imagenet_alexnet", "imagenet_resnet18", "imagenet_resnet50", "imagenet_resnet50_lars"}) {
    std::ifstream f(std::string(KILN_SOURCE_DIR) + "/configs/" + name + ".json");
    Json j = Json::parse(f)["data"];
    EXPECT_EQ(j["root"], "data/imagenet/ILSVRC/Data/CLS-LOC") << name;
    EXPECT_EQ(j["val_labels"], "data/imagenet/LOC_val_solution.csv") << name;
    EXPECT_EQ(j["class_names_file"], "data/imagenet/LOC_synset_mapping.txt") << name;
    j["root"] = t.data, j["val_labels"] = t.csv, j["class_names_file"] = t.synsets;
    const DataConfig c = DataConfig::from_json(j);
    auto val = make_dataset(c, Split::val);
    EXPECT_EQ(val->size(), 5) << name;
    EXPECT_EQ(val->class_names()[0], "tench") << name;
  }
}
