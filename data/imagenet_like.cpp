#include "data/imagenet_like.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "core/check.h"
#include "data/dataset.h"
#include "data/image_decode.h"
#include "data/image_encode.h"
#include "data/image_folder.h"
#include "data/resize.h"
#include "data/transform.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

// ImageNet's common sizes (width x height) and how often each is drawn, in 1/100s: most of ImageNet's
// photos are 500 pixels on the long side, 4:3 landscape first.
struct Size {
  int64_t w, h, weight;
};
constexpr Size kSizes[] = {{500, 375, 45}, {375, 500, 12}, {500, 333, 15}, {333, 500, 5},
                           {500, 500, 8},  {640, 480, 7},  {400, 300, 5},  {800, 600, 3}};

Size draw_size(SampleRng& rng) {
  int64_t total = 0;
  for (const Size& s : kSizes) total += s.weight;
  int64_t r = rng.uniform_int(total);
  for (const Size& s : kSizes) {
    if (r < s.weight) return s;
    r -= s.weight;
  }
  return kSizes[0];
}

// One image: a crop of `photo` of 25-100% of its area with the target's aspect ratio (as near as the
// photo allows), resized to the target, maybe mirrored, a gain per channel and grain.
void make_image(const Image& photo, const Size& size, double grain, SampleRng& rng, Image& scratch, Image& out) {
  const double area = (0.25 + 0.75 * rng.uniform()) * static_cast<double>(photo.h * photo.w);
  const double aspect = static_cast<double>(size.w) / static_cast<double>(size.h);
  const int64_t cw = std::clamp<int64_t>(std::llround(std::sqrt(area * aspect)), 1, photo.w);
  const int64_t ch = std::clamp<int64_t>(std::llround(std::sqrt(area / aspect)), 1, photo.h);
  const CropBox box{rng.uniform_int(photo.h - ch + 1), rng.uniform_int(photo.w - cw + 1), ch, cw};
  resize_image(photo, box, size.h, size.w, "auto", scratch);
  const bool flip = rng.uniform() < 0.5;
  float gain[3];
  for (float& g : gain) g = static_cast<float>(0.8 + 0.4 * rng.uniform());
  // Triangular noise on (-1, 1) (sd 1/sqrt(6)) scaled to `grain` levels: the sum of two uniforms.
  const float k = static_cast<float>(grain * std::sqrt(6.0));
  out.resize(size.h, size.w, 3);
  const uint64_t key = rng.next_u64();
  for (int64_t y = 0; y < size.h; ++y) {
    const uint8_t* src = scratch.data() + y * size.w * 3;  // the photos are decoded as RGB (load_photos)
    uint8_t* dst = out.data() + y * size.w * 3;
    for (int64_t x = 0; x < size.w; ++x) {
      const int64_t sx = flip ? size.w - 1 - x : x;
      const uint64_t bits = mix64(key ^ static_cast<uint64_t>(y * size.w + x) * 0x9e3779b97f4a7c15ull);
      for (int c = 0; c < 3; ++c) {
        const float v = src[sx * 3 + c];
        const float u1 = static_cast<float>((bits >> (c * 20)) & 0x3ff) * (1.0f / 1024);
        const float u2 = static_cast<float>((bits >> (c * 20 + 10)) & 0x3ff) * (1.0f / 1024);
        const float n = (u1 + u2 - 1.0f) * k;
        dst[x * 3 + c] = static_cast<uint8_t>(std::clamp(v * gain[c] + n + 0.5f, 0.0f, 255.0f));
      }
    }
  }
}

std::vector<Image> load_photos(const std::string& folder) {
  std::error_code ec;
  KILN_CHECK(fs::is_directory(folder, ec), "imagenet-like: photos=", folder,
             ": not a folder (a folder of PNG, JPEG or WebP photos is accepted)");
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(folder, ec))
    if (e.is_regular_file(ec) && is_image_file_name(e.path().filename().string())) paths.push_back(e.path().string());
  KILN_CHECK(!ec, "imagenet-like: cannot list photos=", folder, ": ", ec.message());
  std::sort(paths.begin(), paths.end());
  KILN_CHECK(!paths.empty(), "imagenet-like: photos=", folder,
             " holds no image file (.jpg .jpeg .png .bmp .webp are accepted)");
  std::vector<Image> photos(paths.size());
  DecodeOptions d;
  d.channels = 3;
  for (size_t i = 0; i < paths.size(); ++i) {
    load_image(paths[i], d, photos[i]);  // errors name the file
    KILN_CHECK(photos[i].h >= 16 && photos[i].w >= 16, "imagenet-like: photo ", paths[i], " is ", photos[i].w, "x",
               photos[i].h, ": photos of at least 16x16 pixels are accepted");
  }
  return photos;
}

void check_range(const char* key, double v, double lo, double hi) {
  KILN_CHECK(v >= lo && v <= hi, "imagenet-like: ", key, "=", v, " is out of range: ", lo, "..", hi, " is accepted");
}

}  // namespace

std::string imagenet_like_wnid(int64_t c) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "n%08lld", static_cast<long long>(1440764 + 7919 * c));
  return buf;
}

namespace {

// The options in their ranges, and out= a new or empty folder (nothing is overwritten).
void check_options(const ImageNetLikeOptions& o) {
  check_range("classes", static_cast<double>(o.classes), 1, 100000);
  check_range("train", static_cast<double>(o.train_per_class), 1, 100000);
  check_range("val", static_cast<double>(o.val_per_class), 0, 100000);
  check_range("quality", o.quality, 1, 100);
  check_range("grain", o.grain, 0, 64);
  check_range("threads", o.threads, 0, 4096);
  KILN_CHECK(!o.out.empty(), "imagenet-like: out= is required (the folder to write)");
  std::error_code ec;
  if (fs::exists(o.out, ec)) {
    KILN_CHECK(fs::is_directory(o.out, ec) && fs::is_empty(o.out, ec), "imagenet-like: out=", o.out,
               " exists and is not an empty folder: give a new or empty folder (nothing is overwritten)");
  }
}

// The classes' wnids, each with its folder data/train/<wnid>, and data/val.
std::vector<std::string> make_folders(const std::string& data, int64_t classes) {
  std::error_code ec;
  std::vector<std::string> wnids(static_cast<size_t>(classes));
  for (int64_t c = 0; c < classes; ++c) {
    wnids[static_cast<size_t>(c)] = imagenet_like_wnid(c);
    fs::create_directories(data + "/train/" + wnids[static_cast<size_t>(c)], ec);
    KILN_CHECK(!ec, "imagenet-like: cannot make ", data, "/train/", wnids[static_cast<size_t>(c)], ": ", ec.message());
  }
  fs::create_directories(data + "/val", ec);
  KILN_CHECK(!ec, "imagenet-like: cannot make ", data, "/val: ", ec.message());
  return wnids;
}

// "ILSVRC2012_val_00000001" for val image i (from 0), numbered from 1 as ImageNet's are.
std::string val_id(int64_t i) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "ILSVRC2012_val_%08lld", static_cast<long long>(i + 1));
  return std::string(buf);
}

// The index files of the folder `out`: LOC_val_solution.csv (each val image's class and box, the whole
// image) and LOC_synset_mapping.txt (a name per class).
void write_index_files(const std::string& out, const std::vector<std::string>& wnids,
                       const std::vector<int64_t>& val_class, const std::vector<Size>& val_size) {
  {
    const std::string csv = out + "/LOC_val_solution.csv";
    std::ofstream f(csv, std::ios::binary);
    f << "ImageId,PredictionString\n";
    for (size_t i = 0; i < val_class.size(); ++i) {
      const Size& s = val_size[i];
      f << val_id(static_cast<int64_t>(i)) << "," << wnids[static_cast<size_t>(val_class[i])] << " 0 0 " << s.w - 1
        << " " << s.h - 1 << " \n";
    }
    f.flush();
    KILN_CHECK(f.good(), "imagenet-like: cannot write ", csv);
  }
  {
    const std::string mapping = out + "/LOC_synset_mapping.txt";
    std::ofstream f(mapping, std::ios::binary);
    for (size_t c = 0; c < wnids.size(); ++c) f << wnids[c] << " class " << c << ", imagenet-like\n";
    f.flush();
    KILN_CHECK(f.good(), "imagenet-like: cannot write ", mapping);
  }
}

}  // namespace

ImageNetLikeReport make_imagenet_like(const ImageNetLikeOptions& o, const std::function<void(int64_t, int64_t)>& progress) {
  check_options(o);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Image> photos = load_photos(o.photos);

  const std::string data = o.out + "/ILSVRC/Data/CLS-LOC";
  const std::vector<std::string> wnids = make_folders(data, o.classes);

  // Val images: classes interleaved in a fixed shuffled order, numbered from 1 as ImageNet's are.
  const int64_t n_train = o.classes * o.train_per_class, n_val = o.classes * o.val_per_class;
  std::vector<int64_t> val_class(static_cast<size_t>(n_val));
  for (int64_t i = 0; i < n_val; ++i) val_class[static_cast<size_t>(i)] = i % o.classes;
  SampleRng order(SampleRng::sample_key(o.seed, 1, 0));
  for (int64_t i = n_val - 1; i > 0; --i) std::swap(val_class[static_cast<size_t>(i)], val_class[static_cast<size_t>(order.uniform_int(i + 1))]);
  std::vector<Size> val_size(static_cast<size_t>(n_val));

  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t total = n_train + n_val;
  std::atomic<int64_t> next{0}, bytes{0}, done{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  JpegEncodeOptions jo;
  jo.quality = o.quality;
  auto work = [&] {
    Image scratch, img;
    for (int64_t i; !failed && (i = next.fetch_add(1)) < total;) {
      try {
        SampleRng rng(SampleRng::sample_key(o.seed, 0, static_cast<uint64_t>(i)));
        std::string path;
        Size size = draw_size(rng);
        if (i < n_train) {
          const std::string& w = wnids[static_cast<size_t>(i / o.train_per_class)];
          path = data + "/train/" + w + "/" + w + "_" + std::to_string(i % o.train_per_class + 1) + ".JPEG";
        } else {
          path = data + "/val/" + val_id(i - n_train) + ".JPEG";
          val_size[static_cast<size_t>(i - n_train)] = size;
        }
        const Image& photo = photos[static_cast<size_t>(rng.uniform_int(static_cast<int64_t>(photos.size())))];
        make_image(photo, size, o.grain, rng, scratch, img);
        const std::vector<uint8_t> jpeg = encode_jpeg(img.data(), img.h, img.w, 3, jo, path);
        write_file(path, jpeg);
        bytes += static_cast<int64_t>(jpeg.size());
        const int64_t d = ++done;
        if (progress && (d % 1000 == 0 || d == total)) progress(d, total);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);

  write_index_files(o.out, wnids, val_class, val_size);
  ImageNetLikeReport r;
  r.train_files = n_train;
  r.val_files = n_val;
  r.bytes = bytes;
  r.photos = static_cast<int64_t>(photos.size());
  r.threads = threads;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kiln
