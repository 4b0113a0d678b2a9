// Image files: header parsers (dims of small images made with kiln's encoders, libwebp and a BMP
// writer, tests/data/image_test_util.h; crafted WebP VP8X and
// top-down BMP headers), the pixel limit refusing a crafted huge header before decoding, damaged
// files (zero bytes, truncated JPEG, text named .jpg) named in errors or counted as skipped,
// reduced decoding, ImageFolder and list-file datasets and their errors, the same batches with 1 and
// 4 threads, a mid-epoch stop, and `kiln data export` -> image folder round trip.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/config.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data_test_util.h"
#include "image_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;
namespace fs = std::filesystem;

namespace {

using kt::encode;
kt::Pixels pattern_bgr(int h, int w, int seed) { return kt::pattern_rgb(h, w, seed); }  // RGB, despite the old name

ImageHeader header(const std::vector<uint8_t>& b) { return read_image_header(b.data(), b.size(), "mem"); }

std::string decode_error(const std::vector<uint8_t>& b, DecodeOptions o = {}) {
  return kt::error_of([&] {
    Image img;
    decode_image(b.data(), b.size(), "/x/file.bin", o, img);
  });
}

// root/<split>/<class>/<i>.<ext> with n images per class of h x w.
void write_folder(const std::string& root, const std::vector<std::string>& classes, int n, int h, int w,
                  const std::string& ext = ".png") {
  int seed = 0;
  for (const auto& c : classes)
    for (int i = 0; i < n; ++i) kt::write_bytes(root + "/" + c + "/" + std::to_string(i) + ext, encode(pattern_bgr(h, w, seed++), ext));
}

}  // namespace

TEST(ImageHeader, DimsOfEncodedImages) {
  const kt::Pixels m = pattern_bgr(23, 37, 1);
  struct Case {
    std::string ext;
    kt::EncodeParams params;
    ImageFormat f;
  };
  for (const Case& c : std::vector<Case>{{".jpg", {}, ImageFormat::jpeg},
                                         {".jpg", {true}, ImageFormat::jpeg},
                                         {".png", {}, ImageFormat::png},
                                         {".bmp", {}, ImageFormat::bmp},
                                         {".webp", {false, 80}, ImageFormat::webp},     // VP8
                                         {".webp", {false, 101}, ImageFormat::webp}}) {  // VP8L
    auto b = encode(m, c.ext, c.params);
    ImageHeader h = header(b);
    EXPECT_EQ(h.format, c.f) << c.ext;
    EXPECT_EQ(h.width, 37) << c.ext;
    EXPECT_EQ(h.height, 23) << c.ext;
    Image img;
    decode_image(b.data(), b.size(), "mem" + c.ext, {}, img);
    EXPECT_EQ(img.shape(), (ImageShape{23, 37, 3})) << c.ext;
  }
  // VP8X (extended WebP): 24-bit width-1 and height-1 after 4 flag bytes.
  std::vector<uint8_t> x = {'R', 'I', 'F', 'F', 30, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', 'X', 10, 0, 0, 0,
                            0,   0,   0,   0,   0x2B, 0x01, 0x00, 0xC7, 0x00, 0x00};
  ImageHeader h = header(x);
  EXPECT_EQ(h.width, 300);
  EXPECT_EQ(h.height, 200);
  // A top-down BMP stores a negative height.
  auto bmp = encode(m, ".bmp");
  int32_t neg = -23;
  std::memcpy(bmp.data() + 22, &neg, 4);
  EXPECT_EQ(header(bmp).height, 23);
}

TEST(ImageDecode, PixelsAreRgbOrGrey) {
  const kt::Pixels m = pattern_bgr(5, 7, 2);
  auto png = encode(m, ".png");
  Image img;
  decode_image(png.data(), png.size(), "p.png", {}, img);
  ASSERT_EQ(img.shape(), (ImageShape{5, 7, 3}));
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(img.at(y, x, c), kt::pattern(2, y, x, c));
  kt::Pixels grey{4, 3, 1, std::vector<uint8_t>(12)};
  for (int i = 0; i < 12; ++i) grey.px[i] = static_cast<uint8_t>(i * 20);
  auto gpng = encode(grey, ".png");
  DecodeOptions o;
  o.channels = 1;
  decode_image(gpng.data(), gpng.size(), "g.png", o, img);
  ASSERT_EQ(img.shape(), (ImageShape{4, 3, 1}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(img.data()[i], i * 20);
  o.channels = 3;  // a grey file decodes to three equal channels
  decode_image(gpng.data(), gpng.size(), "g.png", o, img);
  EXPECT_EQ(img.at(1, 2, 0), 100);
  EXPECT_EQ(img.at(1, 2, 2), 100);
}

TEST(ImageDecode, HugeHeaderIsRefusedBeforeDecoding) {
  // A PNG that claims 100000 x 100000 (10^10 pixels) and holds no pixel data.
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                              0, 1, 0x86, 0xA0, 0, 1, 0x86, 0xA0, 8, 2, 0, 0, 0};
  std::string e = decode_error(png);
  EXPECT_HAS(e, "/x/file.bin");
  EXPECT_HAS(e, "100000x100000");
  EXPECT_HAS(e, "max_image_pixels");
  // A JPEG whose start-of-frame says 40000 x 30000.
  std::vector<uint8_t> jpg = {0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 11, 8, 0x75, 0x30, 0x9C, 0x40, 1, 1, 0x11, 0};
  EXPECT_EQ(header(jpg).width, 40000);
  e = decode_error(jpg);
  EXPECT_HAS(e, "40000x30000");
  EXPECT_HAS(e, "over the limit of 89478485");
  // Under a raised limit the same JPEG is an error about its missing data, not a 1.2 Gpixel decode.
  DecodeOptions o;
  o.max_pixels = int64_t{1} << 40;
  EXPECT_HAS(decode_error(jpg, o), "truncated");
}

TEST(ImageDecode, DamagedFilesAreNamed) {
  auto jpg = encode(pattern_bgr(40, 50, 3), ".jpg");
  EXPECT_HAS(decode_error({}), "empty file");
  EXPECT_HAS(decode_error(std::vector<uint8_t>(jpg.begin(), jpg.begin() + static_cast<long>(jpg.size() / 2))),
             "truncated JPEG");
  EXPECT_HAS(decode_error(std::vector<uint8_t>(jpg.begin(), jpg.begin() + 30)), "/x/file.bin");
  std::string text = "hello, this is not an image\n";
  std::string e = decode_error(std::vector<uint8_t>(text.begin(), text.end()));
  EXPECT_HAS(e, "/x/file.bin: not a JPEG, PNG, BMP or WebP image");
  auto png = encode(pattern_bgr(40, 50, 3), ".png");
  EXPECT_HAS(decode_error(std::vector<uint8_t>(png.begin(), png.end() - 20)), "truncated PNG");
  // Bytes after the end-of-image marker are harmless.
  jpg.insert(jpg.end(), {0, 0, 0});
  EXPECT_EQ(decode_error(jpg), "");  // no error
}

TEST(ImageDecode, ReducedDecodingRule) {
  auto jpg = encode(pattern_bgr(300, 400, 4), ".jpg");
  ImageHeader h = header(jpg);
  EXPECT_EQ(reduction_factor(h, 0), 1);
  EXPECT_EQ(reduction_factor(h, 300), 1);
  EXPECT_EQ(reduction_factor(h, 150), 2);
  EXPECT_EQ(reduction_factor(h, 70), 4);   // ceil(300 / 4) = 75 >= 70; ceil(300 / 8) = 38 < 70
  EXPECT_EQ(reduction_factor(h, 38), 8);
  Image img;
  DecodeOptions o;
  o.min_side = 70;
  decode_image(jpg.data(), jpg.size(), "r.jpg", o, img);
  EXPECT_EQ(img.shape(), (ImageShape{75, 100, 3}));
  auto png = encode(pattern_bgr(300, 400, 4), ".png");  // only JPEGs are reduced
  EXPECT_EQ(reduction_factor(header(png), 70), 1);
}

TEST(ImageDecode, RegionEqualsFullDecode) {
  const kt::Pixels grey = kt::to_grey(pattern_bgr(61, 77, 5));
  for (int sampling : {0, 1}) {  // colour is written as YCbCr 4:2:0; grey has one component
    for (int progressive : {0, 1}) {
      auto jpg = encode(sampling == 0 ? pattern_bgr(61, 77, 5) : grey, ".jpg", {progressive == 1});
      for (int64_t channels : {3, 1}) {
        DecodeOptions o;
        o.channels = channels;
        Image full, part;
        decode_image(jpg.data(), jpg.size(), "f.jpg", o, full);
        const ImageHeader h = header(jpg);
        std::vector<CropBox> boxes = {{0, 0, 61, 77}, {60, 76, 1, 1}};
        for (int64_t top = 0; top < 61; top += 4)  // every alignment of the box to the iMCU grid
          for (int64_t left = 0; left < 77; left += 3)
            for (auto [bh, bw] : {std::pair<int64_t, int64_t>{1, 5}, {9, 30}, {17, 13}})
              if (top + bh <= 61 && left + bw <= 77) boxes.push_back({top, left, bh, bw});
        for (CropBox want : boxes) {
          CropBox got;
          ASSERT_TRUE(decode_jpeg_region(jpg.data(), jpg.size(), "f.jpg", o, h, want, part, got));
          ASSERT_EQ(got.h, want.h);
          ASSERT_EQ(got.w, want.w);
          ASSERT_LE(got.left + got.w, part.w);
          int max_diff = 0;
          for (int64_t y = 0; y < want.h; ++y)
            for (int64_t x = 0; x < want.w; ++x)
              for (int64_t c = 0; c < channels; ++c)
                max_diff = std::max(max_diff, std::abs(part.at(got.top + y, got.left + x, c) -
                                                       full.at(want.top + y, want.left + x, c)));
          EXPECT_EQ(max_diff, 0) << "sampling " << sampling << " progressive " << progressive << " channels "
                                 << channels << " box " << want.top << "," << want.left << " " << want.h << "x" << want.w;
        }
      }
    }
  }
  // A damaged JPEG body is named.
  auto jpg = encode(pattern_bgr(40, 40, 1), ".jpg");
  for (size_t i = jpg.size() / 2; i < jpg.size() / 2 + 40; ++i) jpg[i] = 0xFF;
  Image img;
  CropBox got;
  std::string e = kt::error_of([&] { decode_jpeg_region(jpg.data(), jpg.size(), "d.jpg", {}, header(jpg), {0, 0, 40, 40}, img, got); });
  EXPECT_TRUE(e.empty() || e.find("d.jpg: damaged JPEG") != std::string::npos) << e;
}

TEST(ImageFolder, ClassesAndFilesSortedAsTorchvision) {
  kt::TempDir dir;
  write_folder(dir.file("b"), {""}, 2, 4, 5);
  write_folder(dir.file("a"), {"", "sub"}, 2, 4, 5);
  kt::write_bytes(dir.file("a/notes.txt"), {'x'});
  kt::write_bytes(dir.file("c/x.JPEG"), encode(pattern_bgr(4, 5, 0), ".jpg"));
  auto ds = ImageFileDataset::open_folder(dir.str(), {}, "test");
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(ds->size(), 7);
  std::vector<std::string> got;
  for (int64_t i = 0; i < ds->size(); ++i)
    got.push_back(fs::relative(ds->entry(i).path, dir.str()).string() + ":" + std::to_string(ds->entry(i).label));
  EXPECT_EQ(got, (std::vector<std::string>{"a/0.png:0", "a/1.png:0", "a/sub/0.png:0", "a/sub/1.png:0", "b/0.png:1",
                                           "b/1.png:1", "c/x.JPEG:2"}));
  EXPECT_EQ(ds->get(6).image.shape(), (ImageShape{4, 5, 3}));
  EXPECT_EQ(ds->image_shape(), (ImageShape{0, 0, 3}));
}

TEST(ImageFolder, ErrorsNameTheFolder) {
  kt::TempDir dir;
  EXPECT_HAS(kt::error_of([&] { ImageFileDataset::open_folder(dir.file("nope"), {}, "t"); }), "no folder " + dir.file("nope"));
  EXPECT_HAS(kt::error_of([&] { ImageFileDataset::open_folder(dir.str(), {}, "t"); }), "holds no class folders");
  write_folder(dir.file("a"), {""}, 1, 3, 3);
  kt::write_bytes(dir.file("b/readme.txt"), {'x'});
  std::string e = kt::error_of([&] { ImageFileDataset::open_folder(dir.str(), {}, "t"); });
  EXPECT_HAS(e, "class folder " + dir.file("b") + " holds no images");
  EXPECT_HAS(e, ".jpg, .jpeg, .png, .bmp, .webp");
}

TEST(ImageList, ReadsPathsAndLabels) {
  kt::TempDir dir;
  write_folder(dir.file("img"), {""}, 3, 4, 4);
  std::ofstream(dir.file("list.txt")) << "# comment\nimg/0.png 2\n\n" << dir.file("img/1.png") << "\t0\r\nimg/2.png 1\n";
  auto ds = ImageFileDataset::open_list(dir.file("list.txt"), 0, {}, "t");
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->num_classes(), 3);
  EXPECT_EQ(ds->entry(0).path, dir.file("img/0.png"));
  EXPECT_EQ(ds->entry(1).path, dir.file("img/1.png"));
  EXPECT_EQ(ds->get(0).label, 2);
  EXPECT_EQ(ds->get(1).label, 0);
  EXPECT_EQ(ImageFileDataset::open_list(dir.file("list.txt"), 10, {}, "t")->num_classes(), 10);
  fs::remove(dir.file("img/2.png"));  // names are read at open time; a missing file fails its sample
  EXPECT_HAS(kt::error_of([&] { ds->get(2); }), "cannot open " + dir.file("img/2.png"));

  auto err = [&](const std::string& text, int64_t k = 0) {
    std::ofstream(dir.file("bad.txt")) << text;
    return kt::error_of([&] { ImageFileDataset::open_list(dir.file("bad.txt"), k, {}, "t"); });
  };
  EXPECT_HAS(err("img/0.png 1\nimg/1.png\n"), dir.file("bad.txt") + ":2: expected \"<path> <label>\"");
  EXPECT_HAS(err("img/0.png one\n"), "bad.txt:1: the label \"one\" is not a whole number");
  EXPECT_HAS(err("img/0.png 1\n\nimg/1.png 5\n", 5), "bad.txt:3: label 5 is out of range; accepted: 0 .. 4");
  EXPECT_HAS(err("img/0.png -1\n"), "bad.txt:1: label -1 is out of range");
  // The largest 64-bit label (found by the fuzzer: 1 + the largest label overflowed) and any label
  // that would size a classifier of more than 2^24 classes are refused by name.
  EXPECT_HAS(err("img/0.png 1\nimg/1.png 9223372036854775807\n"),
             "bad.txt:2: label 9223372036854775807 is out of range; accepted: 0 .. 16777215");
  EXPECT_HAS(err("img/0.png 16777216\n"), "bad.txt:1: label 16777216 is out of range");
  EXPECT_EQ(ImageFileDataset::open_list(dir.file("list.txt"), 0, {}, "t")->num_classes(), 3);
  EXPECT_HAS(err("# only a comment\n"), "names no images");
  EXPECT_HAS(kt::error_of([&] { ImageFileDataset::open_list(dir.file("missing.txt"), 0, {}, "t"); }), "cannot open");
}

namespace {
DataConfig folder_config(const std::string& root, const std::string& extra = "") {
  return DataConfig::from_json(Json::parse(R"({"source": "image_folder", "root": ")" + root + R"(",
    "train_transforms": [{"type": "random_resized_crop", "size": 12}, {"type": "horizontal_flip"},
                         {"type": "color_jitter", "brightness": 0.4, "contrast": 0.4, "saturation": 0.4},
                         {"type": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
    "val_transforms": [{"type": "resize", "size": 14}, {"type": "center_crop", "size": 12},
                       {"type": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
    "batch_size": 5, "seed": 4)" + extra + "}"));
}

}  // namespace

// val/ is labelled by train/'s classes: a class missing from val/ does not shift the labels of the
// classes after it, and a val/ class that train/ lacks is an error naming it.
TEST(ImageFolder, ValUsesTrainClasses) {
  kt::TempDir dir;
  write_folder(dir.file("train"), {"ant", "bee", "cat"}, 2, 4, 4);
  write_folder(dir.file("val"), {"ant", "cat"}, 1, 4, 4);
  DataConfig c = folder_config(dir.str());
  auto val = make_dataset(c, Split::val);
  EXPECT_EQ(val->num_classes(), 3);
  ASSERT_EQ(val->size(), 2);
  auto& files = dynamic_cast<const ImageFileDataset&>(*val);
  EXPECT_EQ(files.entry(0).label, 0);
  EXPECT_EQ(files.entry(1).label, 2);  // "cat" is class 2 of train/, not 1
  write_folder(dir.file("val"), {"dog"}, 1, 4, 4);
  std::string e = kt::error_of([&] { make_dataset(c, Split::val); });
  EXPECT_HAS(e, "class folder " + dir.file("val/dog") + " is not one of the 3 classes of the training split");
}

namespace {
std::vector<std::vector<float>> epoch_images(DataLoader& l, int64_t epoch, std::vector<int64_t>* labels = nullptr) {
  std::vector<std::vector<float>> out;
  l.start_epoch(epoch);
  Batch b;
  while (l.next(b)) {
    out.push_back(b.images.to_float_vector());
    if (labels)
      for (int64_t v : b.labels.to_int_vector()) labels->push_back(v);
  }
  return out;
}
}  // namespace

TEST(ImageFolder, SameBatchesWithOneAndFourThreads) {
  kt::TempDir dir;
  write_folder(dir.file("train"), {"cat", "dog", "eel"}, 7, 20, 30, ".jpg");
  write_folder(dir.file("val"), {"cat", "dog", "eel"}, 2, 17, 15, ".png");
  DataConfig c = folder_config(dir.str());
  std::vector<std::vector<std::vector<float>>> runs;
  for (int64_t threads : {1, 4}) {
    c.loader.workers = threads;
    auto l = make_loader(c, Split::train);
    EXPECT_EQ(l->image_shape(), (ImageShape{12, 12, 3}));
    runs.push_back(epoch_images(*l, 0));
    auto e1 = epoch_images(*l, 1);
    EXPECT_NE(e1, runs.back());
    auto v = make_loader(c, Split::val);
    runs.push_back(epoch_images(*v, 0));
  }
  ASSERT_EQ(runs[0].size(), 5u);  // 21 images in batches of 5
  EXPECT_EQ(runs[0], runs[2]);
  EXPECT_EQ(runs[1], runs[3]);
}

namespace {
// The same files without region decoding: the loader's fallback path.
class NoRegion : public Dataset {
 public:
  explicit NoRegion(std::shared_ptr<const Dataset> d) : d_(std::move(d)) {}
  int64_t size() const override { return d_->size(); }
  int64_t num_classes() const override { return d_->num_classes(); }
  ImageShape image_shape() const override { return d_->image_shape(); }
  std::string name() const override { return d_->name(); }
  void get_into(int64_t i, Sample& out) const override { d_->get_into(i, out); }

 private:
  std::shared_ptr<const Dataset> d_;
};
}  // namespace

TEST(ImageFolder, RegionDecodingGivesTheSameBatches) {
  kt::TempDir dir;
  write_folder(dir.file("train"), {"a", "b"}, 6, 50, 70, ".jpg");
  DataConfig c = folder_config(dir.str(), R"(, "workers": 2, "fast_decode": false)");  // the exact path
  auto ds = make_dataset(c, Split::train);
  Sample s;
  CropBox box;
  ASSERT_TRUE(ds->get_region_into(0, [](int64_t h, int64_t w) { return CropBox{10, 20, 5, 6}; }, s, box));
  EXPECT_EQ(s.image.h, 5);
  DataLoader region(ds, c.train_transforms, c.loader_options(Split::train));
  DataLoader full(std::make_shared<NoRegion>(ds), c.train_transforms, c.loader_options(Split::train));
  EXPECT_EQ(epoch_images(region, 3), epoch_images(full, 3));
}

TEST(ImageFolder, LoaderStopsCleanlyMidEpoch) {
  kt::TempDir dir;
  write_folder(dir.file("train"), {"a", "b"}, 30, 24, 24, ".jpg");
  write_folder(dir.file("val"), {"a", "b"}, 1, 24, 24, ".jpg");
  DataConfig c = folder_config(dir.str(), R"(, "workers": 3, "prefetch": 2, "batch_size": 2)");
  auto l = make_loader(c, Split::train);
  l->start_epoch(0);
  Batch held;
  ASSERT_TRUE(l->next(held));
  l->stop();  // workers are mid-epoch
  l->start_epoch(0);
  Batch again;
  ASSERT_TRUE(l->next(again));
  EXPECT_EQ(again.images.to_float_vector(), held.images.to_float_vector());
  l.reset();  // destroyed mid-epoch, a batch still held
  EXPECT_EQ(held.images.shape(), (Shape{2, 12, 12, 3}));
}

TEST(ImageFolder, DamagedFilesFailOrAreSkipped) {
  kt::TempDir dir;
  write_folder(dir.file("train"), {"a", "b"}, 10, 16, 16, ".jpg");
  write_folder(dir.file("val"), {"a"}, 1, 16, 16, ".jpg");
  auto good = kt::read_bytes(dir.file("train/a/0.jpg"));
  kt::write_bytes(dir.file("train/a/3.jpg"), {});                                                        // zero bytes
  kt::write_bytes(dir.file("train/b/5.jpg"), std::vector<uint8_t>(good.begin(), good.begin() + 200));  // truncated
  std::string text = "not an image";
  kt::write_bytes(dir.file("train/b/7.jpg"), std::vector<uint8_t>(text.begin(), text.end()));
  DataConfig c = folder_config(dir.str(), R"(, "workers": 2, "shuffle": false)");
  {
    auto l = make_loader(c, Split::train);
    std::string e = kt::error_of([&] { epoch_images(*l, 0); });
    EXPECT_HAS(e, dir.file("train/a/3.jpg") + ": empty file");
  }
  c.loader.skip_bad_samples = true;
  c.loader.max_bad_fraction = 0.2;
  std::vector<std::vector<std::vector<float>>> runs;
  for (int64_t threads : {1, 4}) {
    c.loader.workers = threads;
    auto l = make_loader(c, Split::train);
    std::vector<int64_t> labels;
    runs.push_back(epoch_images(*l, 0, &labels));
    LoaderStats s = l->stats();
    EXPECT_EQ(s.skipped, 3);
    ASSERT_EQ(s.bad_samples.size(), 3u);
    std::string all = s.bad_samples[0] + s.bad_samples[1] + s.bad_samples[2];
    EXPECT_HAS(all, "train/a/3.jpg: empty file");
    EXPECT_HAS(all, "train/b/5.jpg: truncated JPEG");
    EXPECT_HAS(all, "train/b/7.jpg: not a JPEG");
    // Replaced by the next index: a/3 -> a/4 (label 0), b/5 -> b/6, b/7 -> b/8 (label 1).
    EXPECT_EQ(labels, (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  }
  EXPECT_EQ(runs[0], runs[1]);
  c.loader.max_bad_fraction = 0.1;  // 3 of 20 is over 10%
  auto l = make_loader(c, Split::train);
  std::string e = kt::error_of([&] { epoch_images(*l, 0); });
  EXPECT_HAS(e, "bad samples in this epoch, over data.max_bad_fraction = 0.1 of its 20 samples");
}

TEST(ImageFolder, ConfigKeysAndReducedDecodeSide) {
  kt::TempDir dir;
  DataConfig c = folder_config(dir.str(), R"(, "channels": 3, "max_image_pixels": 1000000)");
  EXPECT_EQ(c.source_image_shape(), (ImageShape{0, 0, 3}));
  EXPECT_EQ(std::get<ImageFolderOptions>(c.options).max_image_pixels, 1000000);
  EXPECT_EQ(c.train_transforms.min_source_side(), 49);  // ceil(12 * sqrt((4/3) / 0.08))
  EXPECT_EQ(c.val_transforms.min_source_side(), 14);
  Json round = c.to_json();
  EXPECT_EQ(DataConfig::from_json(round).to_json(), round);
  EXPECT_HAS(kt::error_of([] { DataConfig::from_json(Json::parse(R"({"source": "image_folder", "root": "x"})")); }),
             "data.train_transforms: image_folder images vary in size");
  EXPECT_HAS(kt::error_of([] { DataConfig::from_json(Json::parse(R"({"source": "image_list", "train_list": "t"})")); }),
             "data.val_list is required");
  EXPECT_HAS(kt::error_of([] { DataConfig::from_json(Json::parse(R"({"source": "mnist", "root": "x", "channels": 3})")); }),
             "data.channels: only used with the image_folder and image_list sources");
  EXPECT_HAS(kt::error_of([&] { make_dataset(folder_config(dir.str()), Split::train); }), "no folder " + dir.str() + "/train");
}

TEST(ImageNetConfigs, ValidateAndUseTorchvisionRecipes) {
  for (const char* name : {"imagenet_alexnet", "imagenet_resnet18", "imagenet_resnet50"}) {
    std::ifstream f(std::string(KILN_SOURCE_DIR) + "/configs/" + name + ".json");
    Json j = Json::parse(f);
    DataConfig c = DataConfig::from_json(j["data"]);
    EXPECT_EQ(c.source, "image_folder") << name;
    EXPECT_EQ(c.train_transforms.output_shape(c.source_image_shape()), (ImageShape{224, 224, 3})) << name;
    EXPECT_EQ(c.val_transforms.output_shape(c.source_image_shape()), (ImageShape{224, 224, 3})) << name;
    EXPECT_EQ(c.train_transforms.transform(0).type(), "random_resized_crop") << name;
    EXPECT_EQ(c.val_transforms.transform(0).type(), "resize") << name;
    EXPECT_EQ(j["data"]["batch_size"], 256) << name;
    // Sized for the machine: every core but the trainer's decodes, a batch each plus two ready.
    EXPECT_EQ(j["data"]["workers"], "auto") << name;
    EXPECT_EQ(c.loader.workers, LoaderOptions::auto_workers()) << name;
    EXPECT_EQ(c.loader.prefetch, c.loader.workers + 2) << name;
    EXPECT_TRUE(c.loader.fast_decode) << name;
  }
}

