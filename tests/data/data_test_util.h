// Helpers shared by the data tests: the loader tests' small dataset and pipeline, a temporary folder and
// writers for small IDX and CIFAR files.
#pragma once
#include <zlib.h>

#include <atomic>
#include <gtest/gtest.h>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/check.h"
#include "data/pipeline.h"
#include "data/synthetic.h"
#include "tests/expect_error.h"  // error_of

namespace kiln::testing {

// The loader tests' dataset: n synthetic h x w x c images of 7 classes (seed 3).
inline std::shared_ptr<SyntheticDataset> small_synthetic(int64_t n, int64_t h = 6, int64_t w = 5, int64_t c = 3) {
  SyntheticOptions o;
  o.size = n;
  o.height = h;
  o.width = w;
  o.channels = c;
  o.num_classes = 7;
  o.seed = 3;
  return std::make_shared<SyntheticDataset>(o);
}

// Their augmenting pipeline for 6x5x3 images: a padded 5x5 random crop, a flip, a normalize.
inline Pipeline augmenting_pipeline() {
  return Pipeline::from_json(Json::parse(R"([
    {"type": "random_crop", "size": 5, "padding": 1},
    {"type": "horizontal_flip"},
    {"type": "normalize", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3]}])"));
}

// A fresh folder under the system temp dir, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kiln_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile g = gzopen(path.c_str(), "wb");
  gzwrite(g, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(g);
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// An IDX file of unsigned bytes: magic 0x0000 08 <ndims>, big-endian dims, then `data`.
inline std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    b.push_back(static_cast<uint8_t>(d >> 24));
    b.push_back(static_cast<uint8_t>(d >> 16));
    b.push_back(static_cast<uint8_t>(d >> 8));
    b.push_back(static_cast<uint8_t>(d));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// The test's image pattern: pixel (i, y, x, c) of an h x w x ch image.
inline uint8_t pattern(int64_t i, int64_t y, int64_t x, int64_t c) {
  return static_cast<uint8_t>((i * 37 + y * 11 + x * 3 + c * 101) & 0xff);
}

// n images of h x w (one channel) with pattern() pixels and labels i % 10, as IDX bytes.
inline std::vector<uint8_t> idx_images(uint32_t n, uint32_t h, uint32_t w) {
  std::vector<uint8_t> px;
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t y = 0; y < h; ++y)
      for (uint32_t x = 0; x < w; ++x) px.push_back(pattern(i, y, x, 0));
  return idx_bytes({n, h, w}, px);
}
inline std::vector<uint8_t> idx_labels(uint32_t n) {
  std::vector<uint8_t> l;
  for (uint32_t i = 0; i < n; ++i) l.push_back(static_cast<uint8_t>(i % 10));
  return idx_bytes({n}, l);
}

}  // namespace kiln::testing
