// kiln predict (tools/deploy/predict.h, tools/cli/predict_cmd.cpp): a tiny run trained on an image folder of
// four named classes, then predicted through the kiln binary: the same top-1 as `kiln eval`'s path,
// classes.json, CSV and JSONL output, broken inputs among good ones, folders and list files, and
// the errors of bad arguments.
#include <gtest/gtest.h>

#include <algorithm>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "data/image_encode.h"
#include "data/synthetic.h"
#include "tests/expect_error.h"
#include "tools/deploy/config.h"
#include "tools/deploy/predict.h"
#include "tools/engine/trainer.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kClasses = {"ant", "bee", "cat", "dog"};

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream s(text);
  for (std::string l; std::getline(s, l);) lines.push_back(l);
  return lines;
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream s(line);
  for (std::string x; std::getline(s, x, ',');) f.push_back(x);
  return f;
}

// Writes synthetic image `index` (h x w x 3) as a PNG.
void write_png(const std::string& path, int64_t index, int64_t h, int64_t w) {
  SyntheticOptions o;
  o.height = h;
  o.width = w;
  o.size = index + 1;
  Sample s = SyntheticDataset(o).get(index);
  fs::create_directories(fs::path(path).parent_path());
  write_file(path, encode_png(s.image.data(), h, w, 3));
}

struct KilnRun {
  int code = -1;
  std::string out, err;
};

class Predict : public ::testing::Test {
 protected:
  // One run for every test: root/{train,val}/<class>/<i>.png of 8x8, trained a few steps.
  static void SetUpTestSuite() {
    // One folder per process: ctest runs each test in its own process, several at once.
    dir_ = ::testing::TempDir() + "kiln_predict_test_" + std::to_string(::getpid());
    std::error_code ec;
    fs::remove_all(dir_, ec);
    root_ = dir_ + "/images";
    for (int64_t i = 0; i < 64; ++i) {
      const std::string split = i < 48 ? "train" : "val";
      write_png(root_ + "/" + split + "/" + kClasses[static_cast<size_t>(i % 4)] + "/" + std::to_string(i) + ".png", i,
                8, 8);
    }
    json c = json::parse(R"({
      "name": "pred",
      "model": {"layers": [{"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1},
                           {"type": "relu"}, {"type": "flatten"},
                           {"type": "linear", "in_features": 256, "out_features": 4}]},
      "data": {"source": "image_folder",
               "train_transforms": [{"type": "center_crop", "size": 8}],
               "val_transforms": [{"type": "resize", "size": 8}, {"type": "center_crop", "size": 8},
                                  {"type": "normalize", "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}],
               "batch_size": 8, "workers": 0},
      "optim": {"name": "sgd", "lr": 0.05},
      "train": {"epochs": 1, "plots": false, "device": "cpu"}
    })");
    c["data"]["root"] = root_;
    c["train"]["runs_dir"] = dir_ + "/runs";
    run_ = train(c, true).run_dir;
    config_file_ = dir_ + "/config.json";
    std::ofstream(config_file_) << c.dump(2);
  }

  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // A failure in SetUpTestSuite would otherwise read as a skipped test under ctest.
  void SetUp() override { ASSERT_FALSE(run_.empty()) << "training the test's run failed"; }

  static KilnRun kiln(const std::string& args) {
    const std::string out = dir_ + "/stdout.txt", err = dir_ + "/stderr.txt";
    const std::string cmd = std::string(KILN_BINARY_DIR) + "/tools/kiln " + args + " >" + out + " 2>" + err;
    const int status = std::system(cmd.c_str());
    KilnRun r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_text(out);
    r.err = read_text(err);
    return r;
  }

  static std::string dir_, root_, run_, config_file_;
};
std::string Predict::dir_, Predict::root_, Predict::run_, Predict::config_file_;

}  // namespace

TEST_F(Predict, ClassesJsonIsTheClassFolders) {
  EXPECT_EQ(load_class_names(run_ + "/classes.json"), kClasses);
  EXPECT_EQ(json::parse(read_text(run_ + "/classes.json")), json(kClasses));
  std::ofstream(dir_ + "/bad_classes.json") << R"(["a", 2])";
  kiln::testing::expect_error([&] { load_class_names(dir_ + "/bad_classes.json"); },
                              {"bad_classes.json: entry [1] is 2, not a class name"});
}

// Every val image predicted through the binary: its true class (folder) and top-1 rebuild exactly
// the confusion matrix that evaluate() (kiln eval's path, the trainer's loader) computes.
TEST_F(Predict, SameTop1AsEvaluation) {
  KilnRun r = kiln("predict " + run_ + " " + root_ + "/val topk=2 out=" + dir_ + "/val.csv");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("kiln: predicted 16 image(s)"), std::string::npos) << r.err;
  std::vector<std::string> rows = lines_of(read_text(dir_ + "/val.csv"));
  ASSERT_EQ(rows.size(), 17u);
  EXPECT_EQ(rows[0], "path,rank1_class,rank1_prob,rank2_class,rank2_prob,error");
  std::vector<std::vector<int64_t>> confusion(4, std::vector<int64_t>(4, 0));
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < kClasses.size(); ++i) index[kClasses[i]] = static_cast<int64_t>(i);
  for (size_t i = 1; i < rows.size(); ++i) {
    std::vector<std::string> f = split_csv(rows[i]);
    ASSERT_EQ(f.size(), 5u) << rows[i];
    const std::string truth = fs::path(f[0]).parent_path().filename().string();
    ASSERT_TRUE(index.count(truth) && index.count(f[1]) && index.count(f[3])) << rows[i];
    EXPECT_GE(std::stod(f[2]), std::stod(f[4])) << rows[i];
    EXPECT_NE(f[1], f[3]);
    confusion[static_cast<size_t>(index[truth])][static_cast<size_t>(index[f[1]])] += 1;
  }
  EvalResult e = evaluate(load_config_file(run_ + "/config.json"), run_);
  EXPECT_EQ(e.samples, 16);
  EXPECT_EQ(confusion, e.confusion);
}

TEST_F(Predict, CsvAndJsonl) {
  const std::string a = root_ + "/val/ant/48.png", b = root_ + "/val/dog/51.png";
  KilnRun r = kiln("predict " + run_ + " " + a + " " + b + " topk=3 out=" + dir_ + "/p.csv");
  ASSERT_EQ(r.code, 0) << r.err;
  KilnRun j = kiln("predict " + run_ + " " + a + " " + b + " topk=3 out=" + dir_ + "/p.jsonl");
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_EQ(r.out, j.out);  // the stdout lines do not depend on the file format
  std::vector<std::string> out = lines_of(r.out), csv = lines_of(read_text(dir_ + "/p.csv")),
                           jsonl = lines_of(read_text(dir_ + "/p.jsonl"));
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(csv.size(), 3u);
  ASSERT_EQ(jsonl.size(), 2u);
  EXPECT_EQ(csv[0], "path,rank1_class,rank1_prob,rank2_class,rank2_prob,rank3_class,rank3_prob,error");
  EXPECT_EQ(csv[1].back(), ',');  // no error
  for (size_t i = 0; i < 2; ++i) {
    json o = json::parse(jsonl[i]);
    std::vector<std::string> f = split_csv(csv[i + 1]);
    ASSERT_EQ(f.size(), 7u);
    EXPECT_EQ(o["path"], i == 0 ? a : b);
    EXPECT_EQ(f[0], i == 0 ? a : b);
    ASSERT_EQ(o["topk"].size(), 3u);
    std::string line = f[0] + ":";
    for (size_t k = 0; k < 3; ++k) {
      const json& t = o["topk"][k];
      EXPECT_EQ(t["class"], kClasses[t["index"].get<size_t>()]);
      EXPECT_EQ(t["class"], f[1 + 2 * k]);
      EXPECT_NEAR(t["prob"].get<double>(), std::stod(f[2 + 2 * k]), 1e-6);
      EXPECT_GT(t["prob"].get<double>(), 0.0);
      if (k > 0) {
        EXPECT_LE(t["prob"].get<double>(), o["topk"][k - 1]["prob"].get<double>());
      }
      char p[32];
      std::snprintf(p, sizeof p, "%.4f", t["prob"].get<double>());
      line += (k ? ", " : " ") + t["class"].get<std::string>() + " (" + p + ")";
    }
    EXPECT_EQ(out[i], line);
  }
  // topk above the number of classes gives every class, whose probabilities sum to 1.
  r = kiln("predict " + run_ + " " + a + " topk=9 out=" + dir_ + "/all.jsonl");
  ASSERT_EQ(r.code, 0) << r.err;
  json o = json::parse(read_text(dir_ + "/all.jsonl"));
  ASSERT_EQ(o["topk"].size(), 4u);
  double sum = 0;
  for (const json& t : o["topk"]) sum += t["prob"].get<double>();
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST_F(Predict, BrokenInputsAreReportedAndTheOthersPredicted) {
  const std::string d = dir_ + "/mixed";
  fs::create_directories(d);
  write_png(d + "/a.png", 1, 8, 8);
  write_png(d + "/c.png", 2, 12, 10);  // resized and cropped by the validation transforms
  std::ofstream(d + "/b.png") << "not an image";
  std::ofstream(d + "/empty.jpg");
  std::ofstream(d + "/notes.TXT") << "skipped for its extension";
  std::ofstream(d + "/Makefile") << "skipped too";
  fs::create_directories(dir_ + "/no_images");
  std::ofstream(dir_ + "/no_images/x.json") << "{}";
  KilnRun r = kiln("predict " + run_ + " " + d + " " + d + "/missing.png " + dir_ + "/no_images out=" + dir_ +
                   "/mixed.csv");
  EXPECT_EQ(r.code, 1) << r.err;
  std::vector<std::string> out = lines_of(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  EXPECT_EQ(out[0].rfind(d + "/a.png: ", 0), 0u) << out[0];
  EXPECT_EQ(out[1].rfind(d + "/c.png: ", 0), 0u) << out[1];
  for (const std::string& bad : {d + "/b.png", d + "/empty.jpg", d + "/missing.png", dir_ + "/no_images"})
    EXPECT_NE(r.err.find("kiln: predict: " + bad), std::string::npos) << bad << "\n" << r.err;
  EXPECT_NE(r.err.find("kiln: predicted 2 image(s)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("4 input(s) could not be predicted"), std::string::npos) << r.err;
  // The folder scans say what they skipped for its extension.
  EXPECT_NE(r.err.find("kiln: predict: " + d + ": skipped 2 file(s) whose extension is not an image's ((none) 1, .txt 1;"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kiln: predict: " + dir_ + "/no_images: skipped 1 file(s) whose extension is not an image's (.json 1;"),
            std::string::npos) << r.err;
  // The CSV: a row per input, a failed one with its error and empty class columns; 4 classes, so
  // the default topk=5 gives 4 ranks.
  std::vector<std::string> rows = lines_of(read_text(dir_ + "/mixed.csv"));
  ASSERT_EQ(rows.size(), 7u) << read_text(dir_ + "/mixed.csv");
  EXPECT_EQ(rows[0], "path,rank1_class,rank1_prob,rank2_class,rank2_prob,rank3_class,rank3_prob,rank4_class,rank4_prob,"
                     "error");
  std::map<std::string, std::string> row_of;  // path -> the rest of its row
  for (size_t i = 1; i < rows.size(); ++i) {
    const size_t comma = rows[i].find(',');
    ASSERT_NE(comma, std::string::npos) << rows[i];
    row_of[rows[i].substr(0, comma)] = rows[i].substr(comma);
  }
  ASSERT_EQ(row_of.size(), 6u);
  for (const std::string& good : {d + "/a.png", d + "/c.png"}) {
    ASSERT_TRUE(row_of.count(good)) << good;
    EXPECT_EQ(split_csv(good + row_of[good]).size(), 9u) << row_of[good];
    EXPECT_EQ(row_of[good].back(), ',');
  }
  for (const std::string& bad : {d + "/b.png", d + "/empty.jpg", d + "/missing.png", dir_ + "/no_images"}) {
    ASSERT_TRUE(row_of.count(bad)) << bad;
    const std::string& rest = row_of[bad];
    EXPECT_EQ(rest.rfind(",,,,,,,,,", 0), 0u) << rest;  // eight empty class columns, then the error
    EXPECT_NE(rest.find(bad, 9), std::string::npos) << rest;
    EXPECT_NE(rest[9], ',') << rest;
  }
  // The same in JSONL: the failed inputs with their error.
  r = kiln("predict " + run_ + " " + d + "/a.png " + d + "/b.png out=" + dir_ + "/mixed.jsonl");
  EXPECT_EQ(r.code, 1) << r.err;
  std::vector<std::string> objs = lines_of(read_text(dir_ + "/mixed.jsonl"));
  ASSERT_EQ(objs.size(), 2u);
  EXPECT_EQ(json::parse(objs[0])["topk"].size(), 4u);
  json b = json::parse(objs[1]);
  EXPECT_EQ(b["path"], d + "/b.png");
  EXPECT_NE(b["error"].get<std::string>().find(d + "/b.png"), std::string::npos) << objs[1];
  EXPECT_FALSE(b.contains("topk"));
}

TEST_F(Predict, FoldersAreSearchedRecursivelyAndListsRead) {
  const std::string d = dir_ + "/tree";
  write_png(d + "/z.png", 3, 8, 8);
  write_png(d + "/a/b/deep.PNG", 4, 8, 8);
  write_png(d + "/a/x.jpeg.png", 5, 8, 8);
  std::ofstream(d + "/a/notes.txt") << "not an image, not an input inside a folder";
  KilnRun r = kiln("predict " + run_ + " " + d);
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> out = lines_of(r.out);
  ASSERT_EQ(out.size(), 3u) << r.out;
  EXPECT_EQ(out[0].rfind(d + "/a/b/deep.PNG: ", 0), 0u) << r.out;  // sorted by path
  EXPECT_EQ(out[1].rfind(d + "/a/x.jpeg.png: ", 0), 0u) << r.out;
  EXPECT_EQ(out[2].rfind(d + "/z.png: ", 0), 0u) << r.out;
  // A .txt list: bare paths or "<path> <label>" lines, relative to the list's folder.
  std::ofstream(d + "/list.txt") << "# inputs\nz.png\na/b/deep.PNG 2\n";
  r = kiln("predict " + run_ + " " + d + "/list.txt");
  ASSERT_EQ(r.code, 0) << r.err;
  out = lines_of(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  EXPECT_EQ(out[0].rfind(d + "/z.png: ", 0), 0u) << r.out;
  // An empty folder and a file that is no input are reported; nothing else to predict: exit 1.
  fs::create_directories(dir_ + "/empty_dir");
  std::ofstream(dir_ + "/notes.doc") << "x";
  r = kiln("predict " + run_ + " " + dir_ + "/empty_dir " + dir_ + "/notes.doc");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(dir_ + "/empty_dir: the folder holds no image files"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir_ + "/notes.doc: not an image file (.jpg .jpeg .png .bmp .webp), a folder of them or a .txt "
                              "image list"), std::string::npos) << r.err;
}

TEST_F(Predict, BadArgumentsAreOneLineErrors) {
  const std::string img = root_ + "/val/ant/48.png";
  KilnRun r = kiln("predict " + run_ + " " + img + " out=" + dir_ + "/preds.txt");
  EXPECT_EQ(r.code, 1);
  // One line (builds without NDEBUG, the sanitizer build's, append the throwing source line to it).
  EXPECT_EQ(r.err.rfind("kiln: error: out=" + dir_ + "/preds.txt: the format is chosen by the extension; accepted: .csv "
                        "(path,rank1_class,rank1_prob,...) or .jsonl (one JSON object per image)", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(dir_ + "/preds.txt"));
  r = kiln("predict " + run_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("kiln predict: no INPUT given"), std::string::npos) << r.err;
  r = kiln("predict " + run_ + " " + img + " topk=0");
  EXPECT_NE(r.err.find("topk=0: expected a whole number >= 1"), std::string::npos) << r.err;
  r = kiln("predict " + root_ + " " + img);
  EXPECT_NE(r.err.find("kiln predict: '" + root_ + "' is a folder without config.json, not a run folder"), std::string::npos)
      << r.err;
  EXPECT_EQ(kiln("predict --help").code, 0);
}

TEST_F(Predict, ConfigNeedsWeights) {
  const std::string img = root_ + "/val/ant/48.png";
  KilnRun r = kiln("predict " + config_file_ + " " + img);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("a config file needs weights=FILE"), std::string::npos) << r.err;
  r = kiln("predict " + config_file_ + " weights=" + dir_ + "/none.safetensors " + img);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(dir_ + "/none"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  // With weights: the same predictions as the run folder, names from the config's image folder.
  r = kiln("predict " + config_file_ + " weights=" + run_ + "/last.safetensors " + img + " topk=4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, kiln("predict " + run_ + " " + img + " topk=4").out);
  EXPECT_NE(r.out.find("ant ("), std::string::npos) << r.out;
  // A source that cannot be opened: the classes are numbered.
  r = kiln("predict " + config_file_ + " weights=" + run_ + " data.root=" + dir_ + "/nowhere " + img + " topk=4");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* n : {" 0 (", " 1 (", " 2 (", " 3 ("}) EXPECT_NE(r.out.find(n), std::string::npos) << r.out;
}

// In-process: an image that the validation transforms cannot bring to the model's size fails alone.
TEST_F(Predict, WrongSizeFailsAloneNamingTheFile) {
  PredictOptions o;
  o.overrides = {R"(data.val_transforms=[{"type": "random_crop", "size": 8}])"};
  Predictor p(run_, o);
  EXPECT_EQ(p.class_names(), kClasses);
  EXPECT_EQ(p.input_shape(), (ImageShape{8, 8, 3}));
  EXPECT_EQ(p.batch_size(), 8);
  write_png(dir_ + "/small.png", 6, 6, 6);
  std::vector<Prediction> r = p.predict({root_ + "/val/bee/49.png", dir_ + "/small.png"}, 2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].ok()) << r[0].error;
  EXPECT_EQ(r[0].index.size(), 2u);
  EXPECT_FALSE(r[1].ok());
  // Refused from its header, before decoding (data/image_decode.h), naming the file and the step.
  EXPECT_NE(r[1].error.find(dir_ + "/small.png: PNG image of 6x6 (width x height) refused before decoding: "
                                   "data.val_transforms[0]: random_crop: a 8x8 crop does not fit"),
            std::string::npos)
      << r[1].error;

  // A source of fixed-size images (synthetic 8x8x3, no transforms): another size is refused by name;
  // the classes are the source's numbers.
  json c = load_config_file(config_file_);
  c["data"] = json{{"source", "synthetic"}, {"synthetic", {{"height", 8}, {"width", 8}, {"num_classes", 4}}}};
  std::ofstream(dir_ + "/synthetic.json") << c.dump();
  o = PredictOptions{};
  o.weights = run_ + "/last";
  o.batch = 3;
  Predictor q(dir_ + "/synthetic.json", o);
  EXPECT_EQ(q.class_names(), (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(q.batch_size(), 3);
  write_png(dir_ + "/wide.png", 7, 8, 12);
  r = q.predict({dir_ + "/wide.png", root_ + "/val/bee/49.png"}, 1);
  EXPECT_NE(r[0].error.find(dir_ + "/wide.png: a 8x12x3 image gives 8x12x3 after data.val_transforms, but the model "
                                   "takes 8x8x3"), std::string::npos) << r[0].error;
  ASSERT_TRUE(r[1].ok()) << r[1].error;
  // No normalize in this config (pixels / 255) while the run normalizes: only the format is checked.
  EXPECT_EQ(r[1].index.size(), 1u);
}
