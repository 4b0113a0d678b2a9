// Classification reports (tools/engine/report.h): metrics of a hand-made confusion matrix against values
// worked out from the definitions (sklearn's, zero_division=0), the files, the heat map; `kiln eval`
// and the end of training writing them; class weights (tools/engine/class_weights.h) and their plumbing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/image_decode.h"
#include "data/image_encode.h"
#include "data/image_folder.h"
#include "tools/engine/class_weights.h"
#include "tools/deploy/config.h"
#include "tools/engine/report.h"
#include "tools/engine/trainer.h"
#include "tests/data_parallel_config.h"
#include "tests/layers/error_util.h"

using namespace kiln;
using kiln::testing::error_of;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_report_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

// rows: true cat, dog, bird, fish; columns: predicted. fish has no sample and is never predicted.
const std::vector<std::vector<int64_t>> kConfusion = {{5, 1, 0, 0}, {2, 3, 1, 0}, {0, 0, 4, 0}, {0, 0, 0, 0}};
const std::vector<std::string> kNames = {"cat", "dog", "bird", "fish"};

}  // namespace

TEST(Report, MetricsOfAHandMadeMatrix) {
  ClassificationReport r = classification_report(kConfusion, kNames);
  ASSERT_EQ(r.classes.size(), 4u);
  // cat: tp 5 of 7 predicted, 6 true; dog: 3 of 4, 6; bird: 4 of 5, 4; fish: nothing (all 0).
  const double P[] = {5.0 / 7, 3.0 / 4, 4.0 / 5, 0}, R[] = {5.0 / 6, 3.0 / 6, 1, 0};
  const double F[] = {10.0 / 13, 6.0 / 10, 8.0 / 9, 0};  // 2tp / (2tp + fp + fn)
  const int64_t S[] = {6, 6, 4, 0}, Pred[] = {7, 4, 5, 0};
  for (int c = 0; c < 4; ++c) {
    SCOPED_TRACE(kNames[c]);
    EXPECT_EQ(r.classes[c].name, kNames[c]);
    EXPECT_NEAR(r.classes[c].precision, P[c], 1e-15);
    EXPECT_NEAR(r.classes[c].recall, R[c], 1e-15);
    EXPECT_NEAR(r.classes[c].f1, F[c], 1e-15);
    EXPECT_EQ(r.classes[c].support, S[c]);
    EXPECT_EQ(r.classes[c].predicted, Pred[c]);
  }
  EXPECT_EQ(r.total, 16);
  EXPECT_DOUBLE_EQ(r.accuracy, 12.0 / 16);
  // Macro: every class counts, fish too (sklearn with labels=range(4)); weighted: by support.
  EXPECT_NEAR(r.macro_avg.precision, (P[0] + P[1] + P[2]) / 4, 1e-15);
  EXPECT_NEAR(r.macro_avg.recall, (R[0] + R[1] + R[2]) / 4, 1e-15);
  EXPECT_NEAR(r.macro_avg.f1, (F[0] + F[1] + F[2]) / 4, 1e-15);
  EXPECT_NEAR(r.weighted_avg.precision, (6 * P[0] + 6 * P[1] + 4 * P[2]) / 16, 1e-15);
  EXPECT_NEAR(r.weighted_avg.recall, 12.0 / 16, 1e-15);  // support-weighted recall is the accuracy
  EXPECT_NEAR(r.weighted_avg.f1, (6 * F[0] + 6 * F[1] + 4 * F[2]) / 16, 1e-15);
  EXPECT_EQ(r.macro_avg.name, "macro avg");
  EXPECT_EQ(r.weighted_avg.support, 16);
  // Most confused: dog -> cat (2, a third of the dogs), then the two pairs of 1 by class order.
  ASSERT_EQ(r.most_confused.size(), 3u);
  EXPECT_EQ(r.most_confused[0].true_class, 1);
  EXPECT_EQ(r.most_confused[0].predicted, 0);
  EXPECT_EQ(r.most_confused[0].count, 2);
  EXPECT_DOUBLE_EQ(r.most_confused[0].share, 2.0 / 6);
  EXPECT_EQ(r.most_confused[1].true_class, 0);
  EXPECT_EQ(r.most_confused[1].predicted, 1);
  EXPECT_EQ(r.most_confused[2].true_class, 1);
  EXPECT_EQ(r.most_confused[2].predicted, 2);
  EXPECT_EQ(classification_report(kConfusion, kNames, 1).most_confused.size(), 1u);

  std::string table = format_report(r);
  EXPECT_NE(table.find("         cat    0.7143    0.8333    0.7692         6"), std::string::npos) << table;
  EXPECT_NE(table.find("    accuracy                        0.7500        16"), std::string::npos) << table;
  EXPECT_NE(table.find("dog -> cat: 2, 33.3%"), std::string::npos) << table;
}

// 1000 classes (ImageNet): the printed table keeps the 30 of lowest F1, worst first; the averages and
// the accuracy still cover every class.
TEST(Report, ManyClassesPrintOnlyTheWorst) {
  const size_t K = 1000;
  std::vector<std::vector<int64_t>> m(K, std::vector<int64_t>(K, 0));
  for (size_t k = 0; k < K; ++k) m[k][k] = 10;
  m[700][701] = 10;  // class 700: recall 0.5; class 701: precision 0.5
  m[5][6] = 30;      // class 5: recall 0.25 (the worst); class 6: precision 0.25
  ClassificationReport r = classification_report(m);
  std::string table = format_report(r);
  EXPECT_NE(table.find("(the 30 classes of lowest F1 of 1000, worst first; every class is in report.csv)"),
            std::string::npos) << table;
  size_t rows = 0;
  for (size_t i = 0; i < K; ++i)
    if (table.find("\n" + std::string(12 - std::to_string(i).size(), ' ') + std::to_string(i) + " ") !=
        std::string::npos)
      ++rows;
  EXPECT_EQ(rows, 30u) << table;
  const size_t p5 = table.find("           5 "), p6 = table.find("           6 "), p700 = table.find("         700 "),
               p0 = table.find("           0 ");
  ASSERT_NE(p5, std::string::npos);
  ASSERT_NE(p700, std::string::npos);
  EXPECT_LT(p5, p700);   // F1 0.4 before F1 0.667
  EXPECT_LT(p6, p700);
  EXPECT_NE(p0, std::string::npos);  // then the perfect classes in class order: 0 is among them
  EXPECT_EQ(table.find("         999 "), std::string::npos);
  EXPECT_NE(table.find("    accuracy"), std::string::npos);
  EXPECT_NE(format_report(r, 1000).find("         999 "), std::string::npos);  // a larger cap prints them all
}

TEST(Report, NamesDefaultToNumbersAndBadInputIsAnError) {
  ClassificationReport r = classification_report({{1, 0}, {0, 1}});
  EXPECT_EQ(r.names, (std::vector<std::string>{"0", "1"}));
  EXPECT_DOUBLE_EQ(r.accuracy, 1.0);
  EXPECT_TRUE(r.most_confused.empty());
  EXPECT_EQ(classification_report({}).total, 0);  // an empty matrix: nothing to divide by, all 0
  EXPECT_NE(error_of([] { classification_report({{1, 0}, {0, 1}}, {"a"}); }).find("1 class names for 2 classes"),
            std::string::npos);
  EXPECT_NE(error_of([] { classification_report({{1, 0}, {0}}); }).find("row 1 has 1 entries"), std::string::npos);
  EXPECT_NE(error_of([] { classification_report({{1, -1}, {0, 1}}); }).find("confusion[0][1] = -1"), std::string::npos);
}

TEST(Report, FilesHoldTheReport) {
  std::string dir = fresh_dir("files") + "/sub";  // created by the writer
  std::vector<std::string> names = kNames;
  names[3] = "fish, \"gold\"";  // CSV quoting
  ClassificationReport r = classification_report(kConfusion, names);
  std::vector<std::string> paths = write_report_files(r, dir);
  EXPECT_EQ(paths.size(), 5u);
  for (const std::string& p : paths) EXPECT_TRUE(fs::is_regular_file(p)) << p;

  std::vector<std::string> rep = lines_of(dir + "/report.csv");
  ASSERT_EQ(rep.size(), 8u);
  EXPECT_EQ(rep[0], "class,precision,recall,f1,support");
  EXPECT_EQ(rep[1], "cat,0.714286,0.833333,0.769231,6");
  EXPECT_EQ(rep[4], "\"fish, \"\"gold\"\"\",0,0,0,0");
  EXPECT_EQ(rep[5].rfind("macro avg,", 0), 0u);
  EXPECT_EQ(rep[7], "accuracy,,,0.75,16");

  std::vector<std::string> conf = lines_of(dir + "/confusion.csv");
  ASSERT_EQ(conf.size(), 5u);
  EXPECT_EQ(conf[0], "true\\predicted,cat,dog,bird,\"fish, \"\"gold\"\"\"");
  EXPECT_EQ(conf[2], "dog,2,3,1,0");

  std::vector<std::string> pairs = lines_of(dir + "/confused_pairs.csv");
  ASSERT_EQ(pairs.size(), 4u);
  EXPECT_EQ(pairs[0], "true,predicted,count,share");
  EXPECT_EQ(pairs[1], "dog,cat,2,0.333333");

  std::ifstream jf(dir + "/report.json");
  json j = json::parse(jf);
  EXPECT_EQ(j["total"], 16);
  EXPECT_DOUBLE_EQ(j["accuracy"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["classes"][0]["precision"].get<double>(), 5.0 / 7);
  EXPECT_EQ(j["classes"][3]["support"], 0);
  EXPECT_DOUBLE_EQ(j["macro_avg"]["f1"].get<double>(), r.macro_avg.f1);
  EXPECT_EQ(j["confusion"][1], json({2, 3, 1, 0}));
  EXPECT_EQ(j["most_confused"][0]["true_name"], "dog");
  EXPECT_EQ(j["most_confused"][0]["predicted_name"], "cat");
  EXPECT_EQ(j["names"][3], names[3]);

  // The PNG decodes to the size rendered; a diagonal cell of share 1 (bird) is dark blue, a cell of
  // share 0 white, fish's row (no samples) grey. Sampled at a cell's corner, away from its text.
  std::ifstream pf(dir + "/confusion.png", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(pf)), {});
  Image img;
  decode_image(bytes.data(), bytes.size(), "confusion.png", DecodeOptions{}, img);
  HeatMapImage hm = render_confusion(r);
  EXPECT_EQ(img.h, hm.h);
  EXPECT_EQ(img.w, hm.w);
  EXPECT_TRUE(hm.cell_text);
  EXPECT_EQ(hm.label_step, 1);
  auto px = [&](int row, int col, int ch) { return img.at(hm.y0 + row * hm.cell + 2, hm.x0 + col * hm.cell + 2, ch); };
  EXPECT_EQ(px(2, 2, 0), 8);
  EXPECT_EQ(px(2, 2, 1), 48);
  EXPECT_EQ(px(2, 2, 2), 107);
  EXPECT_EQ(px(2, 0, 0), 247);
  EXPECT_EQ(px(2, 0, 2), 255);
  EXPECT_EQ(px(3, 3, 0), 225);
  EXPECT_EQ(px(3, 3, 1), 225);
}

TEST(Report, HeatMapOfManyClassesDropsCellTextAndThinsNames) {
  const int k = 120;
  std::vector<std::vector<int64_t>> c(k, std::vector<int64_t>(k, 0));
  std::vector<std::string> names;
  for (int i = 0; i < k; ++i) {
    c[i][i] = 3;
    c[i][(i + 1) % k] = 1;
    names.push_back("a_rather_long_class_name_number_" + std::to_string(i));  // cut to 24 characters
  }
  ClassificationReport r = classification_report(c, names);
  HeatMapImage hm = render_confusion(r);
  EXPECT_FALSE(hm.cell_text);
  EXPECT_GT(hm.label_step, 1);
  EXPECT_GE(hm.cell, 4);
  EXPECT_LE(hm.w, 1400);  // bounded by the 800 px matrix and the cut names
  EXPECT_LE(hm.h, 1400);
  EXPECT_EQ(hm.rgb.size(), static_cast<size_t>(hm.h * hm.w * 3));
  // Exact colours with no text: share 0.75 on the diagonal, 0.25 beside it.
  auto px = [&](int row, int col, int ch) {
    return hm.rgb[static_cast<size_t>(((hm.y0 + row * hm.cell + 1) * hm.w + hm.x0 + col * hm.cell + 1) * 3 + ch)];
  };
  EXPECT_EQ(px(50, 50, 0), static_cast<uint8_t>(std::lround(247 + (8 - 247) * 0.75)));
  EXPECT_EQ(px(50, 51, 2), static_cast<uint8_t>(std::lround(255 + (107 - 255) * 0.25)));
  EXPECT_EQ(px(50, 52, 1), 251);
  std::string dir = fresh_dir("many");
  write_report_files(r, dir);
  EXPECT_EQ(lines_of(dir + "/confusion.csv").size(), 121u);
  EXPECT_EQ(lines_of(dir + "/confused_pairs.csv").size(), 11u);  // the top 10
}

// --- class weights ----------------------------------------------------------------------------------

// --- the trainer and `kiln eval` ----------------------------------------------------------------------

namespace {

using kiln::testing::kReportFiles;
json tiny_config(const std::string& runs) { return kiln::testing::tiny_report_config(runs); }

}  // namespace

TEST(ReportTrainer, ClassWeightsReachTheLoss) {
  std::string runs = fresh_dir("weights");
  TrainResult plain = train(tiny_config(runs), true);
  json ones = tiny_config(runs);
  apply_overrides(ones, {"train.class_weights=[2,2,2,2]"});  // a constant weight: the plain mean
  TrainResult same = train(ones, true);
  EXPECT_NEAR(same.train_loss, plain.train_loss, 1e-5 * plain.train_loss);
  json skewed = tiny_config(runs);
  apply_overrides(skewed, {"train.class_weights=[8,1,1,0.1]"});
  EXPECT_GT(std::fabs(train(skewed, true).train_loss - plain.train_loss), 1e-3);
  json balanced = tiny_config(runs);
  apply_overrides(balanced, {"train.class_weights=balanced"});
  TrainResult b = train(balanced, true);
  EXPECT_TRUE(std::isfinite(b.train_loss));
  std::ifstream cf(b.run_dir + "/config.json");
  EXPECT_EQ(json::parse(cf)["train"]["class_weights"], "balanced");  // the config as run keeps the option
  json wrong = tiny_config(runs);
  apply_overrides(wrong, {"train.class_weights=[1,2]"});
  std::string m = error_of([&] { train(wrong, true); });
  EXPECT_NE(m.find("train.class_weights lists 2 weights"), std::string::npos) << m;
}

TEST(ReportTrainer, TrainingWritesTheReport) {
  std::string runs = fresh_dir("eval");
  TrainResult r = train(tiny_config(runs), true);
  // The end of training: the report in the run folder, over the whole validation split.
  for (const std::string& f : kReportFiles) EXPECT_TRUE(fs::is_regular_file(r.run_dir + "/" + f)) << f;
  std::ifstream jf(r.run_dir + "/report.json");
  json j = json::parse(jf);
  EXPECT_EQ(j["names"].size(), 4u);
  EXPECT_GT(j["total"].get<int64_t>(), 0);
  EXPECT_NEAR(j["accuracy"].get<double>(), r.val_top1, 1e-9);

}
