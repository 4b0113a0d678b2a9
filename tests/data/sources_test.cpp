// Dataset sources: IDX (plain and gzip, small files written here and the real Fashion-MNIST),
// CIFAR-10/100 binary, synthetic; damaged and missing files must give errors naming the file.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/check.h"
#include "data/cifar.h"
#include "data/file_io.h"
#include "data/idx.h"
#include "data/synthetic.h"
#include "data_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;
using kt::TempDir;

namespace {

// Runs f, expecting a kiln::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F f, const std::vector<std::string>& parts) {
  std::string msg = kt::error_of(f);
  for (const std::string& p : parts) EXPECT_HAS(msg, p);
}

void check_pattern(const Dataset& d, int64_t h, int64_t w) {
  for (int64_t i = 0; i < d.size(); ++i) {
    Sample s = d.get(i);
    ASSERT_EQ(s.image.shape(), (ImageShape{h, w, 1}));
    EXPECT_EQ(s.label, i % 10);
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) ASSERT_EQ(s.image.at(y, x, 0), kt::pattern(i, y, x, 0)) << i << " " << y << " " << x;
  }
}

}  // namespace

TEST(IdxDataset, ReadsPlainAndGzip) {
  TempDir dir;
  kt::write_bytes(dir.file("img"), kt::idx_images(7, 5, 3));
  kt::write_bytes(dir.file("lbl"), kt::idx_labels(7));
  IdxDataset plain(dir.file("img"), dir.file("lbl"));
  EXPECT_EQ(plain.size(), 7);
  EXPECT_EQ(plain.num_classes(), 10);
  EXPECT_EQ(plain.image_shape(), (ImageShape{5, 3, 1}));
  check_pattern(plain, 5, 3);

  kt::write_gzip(dir.file("img.gz"), kt::idx_images(7, 5, 3));
  kt::write_gzip(dir.file("lbl.gz"), kt::idx_labels(7));
  ASSERT_NE(kt::read_bytes(dir.file("img.gz")), kt::idx_images(7, 5, 3));  // really compressed
  IdxDataset gz(dir.file("img.gz"), dir.file("lbl.gz"));
  check_pattern(gz, 5, 3);
}

TEST(IdxDataset, OpenFindsStandardNamesWithOrWithoutGz) {
  TempDir dir;
  kt::write_gzip(dir.file("train-images-idx3-ubyte.gz"), kt::idx_images(4, 2, 2));
  kt::write_bytes(dir.file("train-labels-idx1-ubyte"), kt::idx_labels(4));
  auto d = IdxDataset::open(dir.str(), Split::train, "fashion_mnist");
  EXPECT_EQ(d->size(), 4);
  EXPECT_NE(d->name().find("fashion_mnist train"), std::string::npos);
  // No t10k files: the message lists the names that were tried.
  expect_error([&] { IdxDataset::open(dir.str(), Split::val, "fashion_mnist"); },
               {"fashion_mnist val images", "t10k-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte"});
  expect_error([&] { IdxDataset::open(dir.file("nope"), Split::train); }, {"nope", "not found"});
}

TEST(IdxDataset, DamagedFilesNameTheFile) {
  TempDir dir;
  kt::write_bytes(dir.file("lbl"), kt::idx_labels(6));
  auto images = kt::idx_images(6, 4, 4);

  auto wrong_magic = images;
  wrong_magic[3] = 2;  // 2 dimensions
  kt::write_bytes(dir.file("magic"), wrong_magic);
  expect_error([&] { IdxDataset(dir.file("magic"), dir.file("lbl")); },
               {dir.file("magic"), "magic number 0x00000802", "0x00000803"});
  // Labels given as images and vice versa.
  kt::write_bytes(dir.file("img"), images);
  expect_error([&] { IdxDataset(dir.file("lbl"), dir.file("img")); }, {dir.file("lbl"), "magic number 0x00000801"});

  auto truncated = images;
  truncated.resize(truncated.size() - 5);
  kt::write_bytes(dir.file("trunc"), truncated);
  expect_error([&] { IdxDataset(dir.file("trunc"), dir.file("lbl")); },
               {dir.file("trunc"), "truncated", "[6, 4, 4]", std::to_string(images.size())});

  kt::write_bytes(dir.file("header"), std::vector<uint8_t>(images.begin(), images.begin() + 9));
  expect_error([&] { IdxDataset(dir.file("header"), dir.file("lbl")); }, {dir.file("header"), "truncated IDX header"});

  kt::write_bytes(dir.file("tiny"), {0, 0});
  expect_error([&] { IdxDataset(dir.file("tiny"), dir.file("lbl")); }, {dir.file("tiny"), "2 bytes"});

  auto longer = images;
  longer.push_back(0);
  kt::write_bytes(dir.file("long"), longer);
  expect_error([&] { IdxDataset(dir.file("long"), dir.file("lbl")); }, {dir.file("long"), "1 bytes after"});

  // A gzip stream cut short, and one with damaged compressed bytes.
  kt::write_gzip(dir.file("img.gz"), images);
  auto gz = kt::read_bytes(dir.file("img.gz"));
  kt::write_bytes(dir.file("cut.gz"), std::vector<uint8_t>(gz.begin(), gz.begin() + gz.size() / 2));
  expect_error([&] { IdxDataset(dir.file("cut.gz"), dir.file("lbl")); }, {dir.file("cut.gz"), "truncated gzip"});
  auto bad = gz;
  for (size_t i = 12; i < bad.size() - 8; ++i) bad[i] ^= 0x5a;
  kt::write_bytes(dir.file("bad.gz"), bad);
  expect_error([&] { IdxDataset(dir.file("bad.gz"), dir.file("lbl")); }, {dir.file("bad.gz"), "gzip"});

  kt::write_bytes(dir.file("lbl5"), kt::idx_labels(5));
  expect_error([&] { IdxDataset(dir.file("img"), dir.file("lbl5")); }, {"5 labels", "6 images"});
  expect_error([&] { IdxDataset(dir.file("img"), dir.file("lbl"), 3); }, {dir.file("lbl"), "label 3 of sample 3"});
  expect_error([&] { IdxDataset(dir.file("missing"), dir.file("lbl")); }, {dir.file("missing"), "not found"});

  IdxDataset ok(dir.file("img"), dir.file("lbl"));
  expect_error([&] { ok.get(6); }, {"sample index 6 out of range [0, 6)"});
  expect_error([&] { ok.get(-1); }, {"sample index -1"});
}

TEST(IdxDataset, RealFashionMnist) {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::is_directory(root)) GTEST_SKIP() << root << " not present";
  auto train = IdxDataset::open(root, Split::train, "fashion_mnist");
  auto test = IdxDataset::open(root, Split::val, "fashion_mnist");
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(train->image_shape(), (ImageShape{28, 28, 1}));
  EXPECT_EQ(test->image_shape(), (ImageShape{28, 28, 1}));
  for (auto* d : {train.get(), test.get()}) {
    std::vector<int64_t> per_class(10, 0);
    Sample s;
    for (int64_t i = 0; i < d->size(); ++i) {
      d->get_into(i, s);
      ASSERT_GE(s.label, 0);
      ASSERT_LT(s.label, 10);
      ++per_class[static_cast<size_t>(s.label)];
    }
    // Fashion-MNIST is balanced: 6000 / 1000 images of each class.
    for (int64_t c : per_class) EXPECT_EQ(c, d->size() / 10);
  }
  // The first training image is an ankle boot (class 9) and not blank.
  Sample s0 = train->get(0);
  EXPECT_EQ(s0.label, 9);
  int64_t sum = 0;
  for (int64_t i = 0; i < s0.image.numel(); ++i) sum += s0.image.data()[i];
  EXPECT_GT(sum, 0);
}

namespace {
// A CIFAR record: label byte(s), then planes R, G, B of 32x32 with pattern() pixels.
std::vector<uint8_t> cifar_records(int64_t n, int64_t first, bool hundred) {
  std::vector<uint8_t> b;
  for (int64_t i = first; i < first + n; ++i) {
    if (hundred) b.push_back(static_cast<uint8_t>(i % 20));  // coarse
    b.push_back(static_cast<uint8_t>(hundred ? (i * 7) % 100 : i % 10));
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x) b.push_back(kt::pattern(i, y, x, c));
  }
  return b;
}

void check_cifar(const Dataset& d, int64_t n, bool hundred) {
  ASSERT_EQ(d.size(), n);
  EXPECT_EQ(d.image_shape(), (ImageShape{32, 32, 3}));
  for (int64_t i = 0; i < n; ++i) {
    Sample s = d.get(i);
    EXPECT_EQ(s.label, hundred ? (i * 7) % 100 : i % 10);
    for (int64_t y = 0; y < 32; y += 7)
      for (int64_t x = 0; x < 32; x += 5)
        for (int64_t c = 0; c < 3; ++c) ASSERT_EQ(s.image.at(y, x, c), kt::pattern(i, y, x, c));
  }
}
}  // namespace

TEST(CifarDataset, Cifar10PlanarToHwc) {
  TempDir dir;
  const std::string sub = dir.file("cifar-10-batches-bin");  // the archive's folder, below root
  for (int k = 1; k <= 5; ++k)
    kt::write_bytes(sub + "/data_batch_" + std::to_string(k) + ".bin", cifar_records(2, (k - 1) * 2, false));
  kt::write_bytes(sub + "/test_batch.bin", cifar_records(3, 0, false));
  auto train = CifarDataset::open(CifarKind::cifar10, dir.str(), Split::train);
  EXPECT_EQ(train->num_classes(), 10);
  check_cifar(*train, 10, false);
  auto test = CifarDataset::open(CifarKind::cifar10, sub, Split::val);
  check_cifar(*test, 3, false);

  std::filesystem::remove(sub + "/data_batch_4.bin");
  expect_error([&] { CifarDataset::open(CifarKind::cifar10, dir.str(), Split::train); }, {"data_batch_4.bin"});
  auto cut = cifar_records(2, 0, false);
  cut.pop_back();
  kt::write_bytes(sub + "/test_batch.bin", cut);
  expect_error([&] { CifarDataset::open(CifarKind::cifar10, dir.str(), Split::val); },
               {sub + "/test_batch.bin", "6145 bytes", "3073"});
}

TEST(CifarDataset, Cifar100UsesFineLabels) {
  TempDir dir;
  kt::write_bytes(dir.file("train.bin"), cifar_records(20, 0, true));
  kt::write_bytes(dir.file("test.bin"), cifar_records(4, 0, true));
  auto train = CifarDataset::open(CifarKind::cifar100, dir.str(), Split::train);
  EXPECT_EQ(train->num_classes(), 100);
  check_cifar(*train, 20, true);
  check_cifar(*CifarDataset::open(CifarKind::cifar100, dir.str(), Split::val), 4, true);
  // CIFAR-10 files read as CIFAR-100 do not divide into 3074-byte records.
  kt::write_bytes(dir.file("ten.bin"), cifar_records(2, 0, false));
  expect_error([&] { CifarDataset(CifarKind::cifar100, {dir.file("ten.bin")}, "c100"); }, {dir.file("ten.bin"), "3074"});
  auto bad_label = cifar_records(1, 0, true);
  bad_label[1] = 100;
  kt::write_bytes(dir.file("bad.bin"), bad_label);
  expect_error([&] { CifarDataset(CifarKind::cifar100, {dir.file("bad.bin")}, "c100"); },
               {dir.file("bad.bin"), "label 100 of record 0"});
}

TEST(SyntheticDataset, DeterministicFromSeed) {
  SyntheticOptions o;
  o.size = 50;
  o.height = 5;
  o.width = 7;
  o.channels = 3;
  o.num_classes = 4;
  o.seed = 11;
  SyntheticDataset a(o), b(o);
  o.seed = 12;
  SyntheticDataset c(o);
  EXPECT_EQ(a.image_shape(), (ImageShape{5, 7, 3}));
  std::vector<int64_t> per_class(4, 0);
  int64_t differ = 0;
  for (int64_t i = 0; i < 50; ++i) {
    Sample sa = a.get(i), sb = b.get(i), sc = c.get(i);
    ASSERT_EQ(sa.image.numel(), 105);
    EXPECT_TRUE(std::equal(sa.image.data(), sa.image.data() + 105, sb.image.data()));
    EXPECT_EQ(sa.label, sb.label);
    differ += !std::equal(sa.image.data(), sa.image.data() + 105, sc.image.data());
    ASSERT_GE(sa.label, 0);
    ASSERT_LT(sa.label, 4);
    ++per_class[static_cast<size_t>(sa.label)];
  }
  EXPECT_EQ(differ, 50);
  for (int64_t n : per_class) EXPECT_GT(n, 0);
  // Neighbouring samples differ too.
  Sample s0 = a.get(0), s1 = a.get(1);
  EXPECT_FALSE(std::equal(s0.image.data(), s0.image.data() + 105, s1.image.data()));

  Json j = SyntheticOptions::from_json(Json{{"size", 9}, {"height", 2}}).to_json();
  EXPECT_EQ(j["size"], 9);
  EXPECT_EQ(j["height"], 2);
  EXPECT_EQ(j["width"], 32);  // default
  expect_error([&] { SyntheticOptions::from_json(Json{{"heigth", 2}}, "data.synthetic"); },
               {"data.synthetic.heigth", "did you mean data.synthetic.height"});
  expect_error([&] { SyntheticOptions::from_json(Json{{"size", 0}}, "data.synthetic"); }, {"data.synthetic.size"});
}
