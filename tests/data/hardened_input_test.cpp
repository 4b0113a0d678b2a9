// Hardened inputs (issue "Images and datasets"): a failed decode never leaves pixels behind (damaged
// PNG headers, BMPs with unsupported fields; counted in skip mode), corrupt-data JPEGs (truncated
// with an end marker appended) are errors, headers that claim more than the file can hold are
// refused before decoding, only regular files are opened (a FIFO does not hang the loader, a
// directory in a list file is named), a .gz IDX file inflates no further than its header declares,
// skipped samples are reported per split with their paths and max_bad_fraction applies per split,
// the decoder libraries print nothing, and CMYK JPEGs decode to RGB.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <jpeglib.h>

#include "data/config.h"
#include "data/file_io.h"
#include "data/idx.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data_test_util.h"
#include "image_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;
namespace fs = std::filesystem;

namespace {

std::string decode_error(const std::vector<uint8_t>& b, Image& img, DecodeOptions o = {}) {
  return kt::error_of([&] { decode_image(b.data(), b.size(), "/d/bad.file", o, img); });
}

// A PNG whose IHDR bit depth is damaged (its CRC no longer matches).
std::vector<uint8_t> damaged_png_header() {
  auto png = kt::encode(kt::pattern_rgb(9, 11, 1), ".png");
  png[24] = 7;  // bit depth 7
  return png;
}

// BMPs with fields kiln's reader does not accept.
std::vector<std::vector<uint8_t>> unsupported_bmps() {
  const auto good = kt::encode(kt::pattern_rgb(6, 5, 2), ".bmp");
  std::vector<std::vector<uint8_t>> out;
  auto bpp16 = good;
  bpp16[28] = 16;
  out.push_back(bpp16);
  auto rle = good;
  rle[30] = 1;  // BI_RLE8
  out.push_back(rle);
  auto header64 = good;
  header64[14] = 64;  // an OS/2 2.x header size
  out.push_back(header64);
  auto short_rows = good;
  short_rows.resize(good.size() - 10);  // the last row is cut
  out.push_back(short_rows);
  return out;
}

// The JPEG's bytes with its start-of-frame dimensions replaced.
std::vector<uint8_t> with_jpeg_size(std::vector<uint8_t> jpg, int w, int h) {
  for (size_t i = 2; i + 9 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && (jpg[i + 1] == 0xC0 || jpg[i + 1] == 0xC2)) {
      jpg[i + 5] = static_cast<uint8_t>(h >> 8), jpg[i + 6] = static_cast<uint8_t>(h);
      jpg[i + 7] = static_cast<uint8_t>(w >> 8), jpg[i + 8] = static_cast<uint8_t>(w);
      return jpg;
    }
  ADD_FAILURE() << "no SOF marker";
  return jpg;
}

DataConfig folder_config(const std::string& root, const std::string& extra = "") {
  return DataConfig::from_json(Json::parse(R"({"source": "image_folder", "root": ")" + root + R"(",
    "train_transforms": [{"type": "center_crop", "size": 8}], "val_transforms": [{"type": "center_crop", "size": 8}],
    "batch_size": 3, "workers": 2, "shuffle": false)" + extra + "}"));
}

void write_images(const std::string& dir, int n, const std::string& ext = ".png") {
  for (int i = 0; i < n; ++i) kt::write_bytes(dir + "/" + std::to_string(i) + ext, kt::encode(kt::pattern_rgb(8, 8, i), ext));
}

int64_t run_epoch(DataLoader& l, int64_t epoch = 0) {
  l.start_epoch(epoch);
  Batch b;
  int64_t n = 0;
  while (l.next(b)) n += b.size();
  return n;
}

}  // namespace

TEST(HardenedDecode, FailedDecodeLeavesNoEarlierPixels) {
  Image img;
  const auto good = kt::encode(kt::pattern_rgb(9, 11, 1), ".png");
  decode_image(good.data(), good.size(), "good.png", {}, img);
  ASSERT_EQ(img.shape(), (ImageShape{9, 11, 3}));
  std::string e = decode_error(damaged_png_header(), img);
  EXPECT_HAS(e, "/d/bad.file: damaged PNG image");
  EXPECT_EQ(img.numel(), 0) << "a failed decode must not leave the previous image's pixels";
  for (const auto& bmp : unsupported_bmps()) {
    decode_image(good.data(), good.size(), "good.png", {}, img);
    e = decode_error(bmp, img);
    EXPECT_HAS(e, "/d/bad.file: ");
    EXPECT_TRUE(e.find("accepted") != std::string::npos || e.find("truncated BMP") != std::string::npos) << e;
    EXPECT_EQ(img.numel(), 0) << e;
  }
  // The supported BMP kinds decode to their pixels: 24-bit, 8-bit grey palette, 32-bit, top-down.
  const kt::Pixels p = kt::pattern_rgb(6, 5, 2);
  auto bmp = kt::encode(p, ".bmp");
  decode_image(bmp.data(), bmp.size(), "b.bmp", {}, img);
  EXPECT_TRUE(std::equal(p.px.begin(), p.px.end(), img.data()));
  const kt::Pixels g = kt::to_grey(p);
  auto gbmp = kt::encode(g, ".bmp");
  DecodeOptions grey;
  grey.channels = 1;
  decode_image(gbmp.data(), gbmp.size(), "g.bmp", grey, img);
  EXPECT_TRUE(std::equal(g.px.begin(), g.px.end(), img.data()));
}

TEST(HardenedDecode, BadFilesAreCountedInSkipMode) {
  kt::TempDir dir;
  write_images(dir.file("train/a"), 6);
  write_images(dir.file("val/a"), 3);
  kt::write_bytes(dir.file("train/a/1.png"), damaged_png_header());
  kt::write_bytes(dir.file("train/a/4.bmp"), unsupported_bmps()[0]);
  DataConfig c = folder_config(dir.str(), R"(, "skip_bad_samples": true, "max_bad_fraction": 0.5)");
  auto l = make_loader(c, Split::train);
  std::vector<std::string> reports;
  l->set_reporter([&](const std::string& r) { reports.push_back(r); });
  EXPECT_EQ(run_epoch(*l), 7);
  const LoaderStats s = l->stats();
  EXPECT_EQ(s.skipped, 2);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_HAS(reports[0], "image_folder train");
  EXPECT_HAS(reports[0], "skipped 2 bad sample(s) of 7 in epoch 1");
  EXPECT_HAS(reports[0], dir.file("train/a/1.png") + ": damaged PNG");
  EXPECT_HAS(reports[0], dir.file("train/a/4.bmp") + ": BMP of 16 bits per pixel");
}

TEST(HardenedDecode, CorruptJpegDataIsAnError) {
  Image img;
  const auto jpg = kt::encode(kt::pattern_rgb(64, 80, 3), ".jpg");
  // Truncated in the middle of its scan, with an end-of-image marker appended: the old decoder
  // gave grey filler for the missing rows.
  std::vector<uint8_t> cut(jpg.begin(), jpg.begin() + static_cast<long>(jpg.size() * 2 / 3));
  cut.push_back(0xFF);
  cut.push_back(0xD9);
  std::string e = decode_error(cut, img);
  EXPECT_HAS(e, "/d/bad.file: damaged JPEG image (80x64): libjpeg: Corrupt JPEG data");
  EXPECT_EQ(img.numel(), 0);
  // Region decoding of rows in the missing part fails too.
  DecodeOptions o;
  const ImageHeader h = read_image_header(cut.data(), cut.size(), "cut.jpg");
  CropBox got;
  e = kt::error_of([&] { decode_jpeg_region(cut.data(), cut.size(), "cut.jpg", o, h, {48, 0, 16, 80}, img, got); });
  EXPECT_HAS(e, "cut.jpg: damaged JPEG image");
  // Reduced decoding reads the same data.
  o.min_side = 8;
  EXPECT_HAS(decode_error(cut, img, o), "Corrupt JPEG data");
  // The intact file decodes.
  EXPECT_EQ(decode_error(jpg, img), "");  // no error
  EXPECT_EQ(img.shape(), (ImageShape{64, 80, 3}));
}

TEST(HardenedDecode, ImplausibleSizesAreRefusedBeforeDecoding) {
  Image img;
  // 9000 x 9000 (81 Mpixel, under the pixel limit) over the scan of an 16x16 image.
  const auto small = kt::encode(kt::pattern_rgb(16, 16, 4), ".jpg");
  for (bool progressive : {false, true}) {
    auto big = with_jpeg_size(kt::encode(kt::pattern_rgb(16, 16, 4), ".jpg", {progressive}), 9000, 9000);
    std::string e = decode_error(big, img);
    EXPECT_HAS(e, "/d/bad.file: JPEG header claims 9000x9000");
    EXPECT_HAS(e, "a damaged or crafted file");
    EXPECT_EQ(img.numel(), 0);
  }
  // Within the plausible ratio, a header lie is still caught by the decoder (missing data).
  auto lie = with_jpeg_size(small, 160, 160);
  EXPECT_HAS(decode_error(lie, img), "Corrupt JPEG data");
  // PNG: a 9000 x 9000 RGB header over a few hundred bytes; deflate cannot inflate that far.
  auto png = kt::encode(kt::pattern_rgb(16, 16, 4), ".png");
  for (int at : {16, 20}) png[at] = 0, png[at + 1] = 0, png[at + 2] = 0x23, png[at + 3] = 0x28;  // 9000
  EXPECT_HAS(decode_error(png, img), "/d/bad.file: PNG header claims 9000x9000");
  // The pixel limit still applies first.
  DecodeOptions tight;
  tight.max_pixels = 100;
  EXPECT_HAS(decode_error(small, img, tight), "over the limit of 100");
}

TEST(HardenedFiles, OnlyRegularFilesAreOpened) {
  kt::TempDir dir;
  write_images(dir.file("train/a"), 4);
  write_images(dir.file("val/a"), 2);
  fs::remove(dir.file("train/a/2.png"));
  ASSERT_EQ(::mkfifo(dir.file("train/a/2.png").c_str(), 0600), 0) << "mkfifo: " << std::strerror(errno);
  auto ds = make_dataset(folder_config(dir.str()), Split::train);
  ASSERT_EQ(ds->size(), 4);
  // Loading the FIFO must not wait for a writer: run it aside, and unblock it if it does hang.
  auto f = std::async(std::launch::async, [&] { return kt::error_of([&] { ds->get(2); }); });
  if (f.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    const int w = ::open(dir.file("train/a/2.png").c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    FAIL() << "reading a FIFO blocked";
  }
  std::string e = f.get();
  EXPECT_HAS(e, dir.file("train/a/2.png") + ": a named pipe (FIFO), not a regular file");
  // In skip mode it is skipped and counted, and the epoch ends.
  DataConfig c = folder_config(dir.str(), R"(, "skip_bad_samples": true, "max_bad_fraction": 0.5)");
  auto l = make_loader(c, Split::train);
  l->set_reporter([](const std::string&) {});
  EXPECT_EQ(run_epoch(*l), 4);
  EXPECT_EQ(l->stats().skipped, 1);
  // A list-file entry that is a directory is named (it used to end in std::bad_alloc).
  fs::create_directories(dir.file("folder.png"));
  std::ofstream(dir.file("list.txt")) << "train/a/0.png 0\nfolder.png 1\n";
  auto list = ImageFileDataset::open_list(dir.file("list.txt"), 0, {}, "t");
  EXPECT_HAS(kt::error_of([&] { list->get(1); }), dir.file("folder.png") + ": a directory, not a regular file");
  // The dataset readers refuse them too.
  EXPECT_HAS(kt::error_of([&] { read_file_bytes(dir.file("train/a/2.png")); }), "named pipe");
  EXPECT_HAS(kt::error_of([&] { read_file_bytes(dir.file("folder.png")); }), "a directory, not a regular file");
}

TEST(HardenedFiles, GzipIdxInflatesNoFurtherThanItsHeader) {
  kt::TempDir dir;
  kt::write_gzip(dir.file("labels.gz"), kt::idx_labels(2));
  // A header declaring 2 images of 4x4 (32 bytes) followed by 256 MB of zeros (~250 KB of gzip).
  auto bomb = kt::idx_images(2, 4, 4);
  {
    gzFile g = gzopen(dir.file("images.gz").c_str(), "wb9");
    gzwrite(g, bomb.data(), static_cast<unsigned>(bomb.size()));
    std::vector<uint8_t> zeros(1 << 20, 0);
    for (int i = 0; i < 256; ++i) gzwrite(g, zeros.data(), static_cast<unsigned>(zeros.size()));
    gzclose(g);
  }
  ASSERT_LT(fs::file_size(dir.file("images.gz")), size_t{2} << 20);
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  std::string e = kt::error_of([&] { IdxDataset(dir.file("images.gz"), dir.file("labels.gz")); });
  getrusage(RUSAGE_SELF, &after);
  EXPECT_HAS(e, dir.file("images.gz"));
  EXPECT_HAS(e, "inflates past the 48 bytes its header declares");
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB of peak memory growth";
  // A header that declares more than the compressed bytes could ever hold is refused up front.
  kt::write_gzip(dir.file("huge.gz"), kt::idx_bytes({1000000, 1000, 1000}, {1, 2, 3}));
  EXPECT_HAS(kt::error_of([&] { IdxDataset(dir.file("huge.gz"), dir.file("labels.gz")); }),
             "its content declares 1000000000016 bytes, more than the");
  // A gzip of something else is named as such, not inflated to the end.
  kt::write_gzip(dir.file("text.gz"), std::vector<uint8_t>(1000, 'x'));
  EXPECT_HAS(kt::error_of([&] { IdxDataset(dir.file("text.gz"), dir.file("labels.gz")); }), "not an IDX images file");
  // An honest file still reads.
  kt::write_gzip(dir.file("ok.gz"), kt::idx_images(2, 4, 4));
  IdxDataset ok(dir.file("ok.gz"), dir.file("labels.gz"));
  EXPECT_EQ(ok.size(), 2);
  EXPECT_EQ(ok.get(1).image.at(3, 3, 0), kt::pattern(1, 3, 3, 0));
}

TEST(LoaderReports, BadSamplesAreReportedPerSplit) {
  kt::TempDir dir;
  write_images(dir.file("train/a"), 6);
  write_images(dir.file("val/a"), 4);
  kt::write_bytes(dir.file("val/a/2.png"), {'n', 'o', 'p', 'e'});
  DataConfig c = folder_config(dir.str(), R"(, "skip_bad_samples": true, "max_bad_fraction": 0.3)");
  // val: 1 bad of 4 (25%) is within 0.3 and reported with its split and path.
  auto val = make_loader(c, Split::val);
  std::vector<std::string> reports;
  val->set_reporter([&](const std::string& r) { reports.push_back(r); });
  EXPECT_EQ(run_epoch(*val), 4);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_HAS(reports[0], "image_folder val (" + dir.file("val") + "): skipped 1 bad sample(s) of 4 in epoch 1");
  EXPECT_HAS(reports[0], dir.file("val/a/2.png") + ": not a JPEG, PNG, BMP or WebP image");
  // The train split has no bad sample: no report.
  auto train = make_loader(c, Split::train);
  std::vector<std::string> train_reports;
  train->set_reporter([&](const std::string& r) { train_reports.push_back(r); });
  EXPECT_EQ(run_epoch(*train), 6);
  EXPECT_TRUE(train_reports.empty());
  // max_bad_fraction counts each split by itself: 1 of val's 4 is over 0.2, though 1 of the 10
  // samples of both splits would not be.
  c.loader.max_bad_fraction = 0.2;
  auto strict = make_loader(c, Split::val);
  std::string e = kt::error_of([&] { run_epoch(*strict); });
  EXPECT_HAS(e, "bad samples in this epoch, over data.max_bad_fraction = 0.2 of its 4 samples (image_folder val");
  // The default reporter writes one warning block to stderr.
  c.loader.max_bad_fraction = 0.3;
  auto loud = make_loader(c, Split::val);
  ::testing::internal::CaptureStderr();
  run_epoch(*loud, 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_HAS(err, "kiln: warning: image_folder val");
  EXPECT_HAS(err, "in epoch 3");
  EXPECT_HAS(err, "val/a/2.png");
}

TEST(DecoderMessages, NothingIsPrintedOnStderr) {
  const kt::Pixels p = kt::pattern_rgb(40, 48, 5);
  const auto jpg = kt::encode(p, ".jpg"), png = kt::encode(p, ".png"), webp = kt::encode(p, ".webp");
  std::vector<std::vector<uint8_t>> bad;
  auto smashed = jpg;  // bytes in the scan overwritten: bad Huffman codes
  for (size_t i = jpg.size() / 2; i < jpg.size() / 2 + 30; ++i) smashed[i] = static_cast<uint8_t>(i * 37);
  bad.push_back(smashed);
  std::vector<uint8_t> cut(jpg.begin(), jpg.begin() + static_cast<long>(jpg.size() / 2));
  cut.insert(cut.end(), {0xFF, 0xD9});
  bad.push_back(cut);
  auto extra = jpg;  // junk between the scan and the end marker ("extraneous bytes")
  extra.insert(extra.end() - 2, {1, 2, 3, 4});
  bad.push_back(extra);
  auto idat = png;  // a damaged IDAT (CRC mismatch)
  idat[png.size() - 20] ^= 0x55;
  bad.push_back(idat);
  bad.push_back(damaged_png_header());
  std::vector<uint8_t> wcut(webp.begin(), webp.begin() + static_cast<long>(webp.size() * 2 / 3));
  bad.push_back(wcut);
  // A PNG with a damaged ancillary chunk (tEXt with a wrong CRC) before IDAT: libpng warns and
  // drops the chunk; the pixels are intact, so it decodes, silently.
  auto text = png;
  const std::vector<uint8_t> chunk = {0, 0, 0, 3, 't', 'E', 'X', 't', 'a', 0, 'b', 1, 2, 3, 4};
  text.insert(text.begin() + 33, chunk.begin(), chunk.end());
  ::testing::internal::CaptureStderr();
  std::vector<std::string> errors;
  Image img;
  for (const auto& b : bad) errors.push_back(kt::error_of([&] { decode_image(b.data(), b.size(), "bad.img", {}, img); }));
  const std::string text_error = kt::error_of([&] { decode_image(text.data(), text.size(), "text.png", {}, img); });
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed, "");
  for (size_t i = 0; i < errors.size(); ++i) EXPECT_HAS(errors[i], "bad.img: ") << "case " << i;
  EXPECT_EQ(text_error, "");  // no error
  EXPECT_TRUE(std::equal(p.px.begin(), p.px.end(), img.data()));
}


// CMYK JPEGs decode to RGB as OpenCV did (R = K - (255 - C) K / 256), and region decoding leaves
// them to the full decode.
TEST(HardenedDecode, CmykJpegDecodesToRgb) {
  const auto jpg = kt::cmyk_jpeg(16, 24, {255, 128, 0, 200});
  Image img;
  decode_image(jpg.data(), jpg.size(), "cmyk.jpg", {}, img);
  ASSERT_EQ(img.shape(), (ImageShape{16, 24, 3}));
  const int want[3] = {200 - ((0 * 200) >> 8), 200 - ((127 * 200) >> 8), 200 - ((255 * 200) >> 8)};
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(img.at(5, 7, c), want[c], 3) << c;
  DecodeOptions grey;
  grey.channels = 1;
  decode_image(jpg.data(), jpg.size(), "cmyk.jpg", grey, img);
  EXPECT_NEAR(img.at(5, 7, 0), (want[0] * 4899 + want[1] * 9617 + want[2] * 1868) >> 14, 3);
  CropBox got;
  EXPECT_FALSE(decode_jpeg_region(jpg.data(), jpg.size(), "cmyk.jpg", {}, read_image_header(jpg.data(), jpg.size(), "c"),
                                  {0, 0, 4, 4}, img, got));
}
