// Header-checked OpenCV decoding (see image_decode.h).
#include "data/image_decode.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/check.h"

namespace kiln {

int reduction_factor(const ImageHeader& h, int64_t min_side) {
  if (min_side <= 0 || h.format != ImageFormat::jpeg) return 1;
  const int64_t s = std::min(h.width, h.height);
  int f = 1;
  for (int g : {2, 4, 8})
    if ((s + g - 1) / g >= min_side) f = g;
  return f;
}

namespace {
// The header, after the checks every decode makes: channels, pixel limit, truncation.
ImageHeader checked_header(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& o) {
  KILN_CHECK(o.channels == 1 || o.channels == 3, name, ": decoding to ", o.channels, " channels; accepted: 1 or 3");
  const ImageHeader h = read_image_header(data, size, name);
  // NOTE: a forged header's width * height can pass int64 (a PNG's 2^32-1 x 2^32-1), so the limit is
  // compared by division and the product printed as unsigned (exact below 2^64).
  const bool fits = h.width <= 0 || h.height <= o.max_pixels / h.width;
  KILN_CHECK(fits, name, ": ", image_format_name(h.format), " image of ", h.width, "x", h.height, " = ",
             static_cast<uint64_t>(h.width) * static_cast<uint64_t>(h.height), " pixels is over the limit of ", o.max_pixels,
             " (data.max_image_pixels, a guard against decompression bombs); raise it to accept this image");
  check_image_complete(data, size, h, name);
  return h;
}
}  // namespace

void decode_image(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& o, Image& out) {
  const ImageHeader h = checked_header(data, size, name, o);

  const int f = reduction_factor(h, o.min_side);
  int flags = cv::IMREAD_IGNORE_ORIENTATION;
  if (o.channels == 3)
    flags |= f == 8 ? cv::IMREAD_REDUCED_COLOR_8 : f == 4 ? cv::IMREAD_REDUCED_COLOR_4 : f == 2 ? cv::IMREAD_REDUCED_COLOR_2 : cv::IMREAD_COLOR;
  else
    flags |= f == 8 ? cv::IMREAD_REDUCED_GRAYSCALE_8
             : f == 4 ? cv::IMREAD_REDUCED_GRAYSCALE_4
             : f == 2 ? cv::IMREAD_REDUCED_GRAYSCALE_2
                      : cv::IMREAD_GRAYSCALE;
  thread_local cv::Mat m;
  try {
    cv::imdecode(cv::Mat(1, static_cast<int>(size), CV_8U, const_cast<uint8_t*>(data)), flags, &m);
  } catch (const cv::Exception& e) {
    KILN_FAIL(name, ": ", image_format_name(h.format), " decoder failed: ", e.what());
  }
  KILN_CHECK(!m.empty(), name, ": damaged ", image_format_name(h.format), " image (", h.width, "x", h.height,
             " in its header); OpenCV could not decode it");
  KILN_CHECK(m.depth() == CV_8U && m.channels() == o.channels, name, ": decoded to an unexpected OpenCV type ",
             m.type());
  out.resize(m.rows, m.cols, o.channels);
  cv::Mat dst(m.rows, m.cols, o.channels == 3 ? CV_8UC3 : CV_8UC1, out.data());
  if (o.channels == 3) cv::cvtColor(m, dst, cv::COLOR_BGR2RGB);
  else m.copyTo(dst);
}

void read_whole_file(const std::string& path, std::vector<uint8_t>& buf) {
  // Only regular files: a folder opens, then ftell gives LONG_MAX (resize -> bad_alloc); a pipe blocks.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  KILN_CHECK(!std::filesystem::exists(st) || std::filesystem::is_regular_file(st), "cannot read ", path,
             ": not a regular file (a folder, a pipe or a device)");
  FILE* f = std::fopen(path.c_str(), "rb");
  KILN_CHECK(f, "cannot open ", path, ": ", std::strerror(errno));
  std::fseek(f, 0, SEEK_END);
  const long n = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  if (n < 0) {
    std::fclose(f);
    KILN_FAIL("cannot read ", path, " (not a regular file?)");
  }
  buf.resize(static_cast<size_t>(n));
  const size_t got = n > 0 ? std::fread(buf.data(), 1, buf.size(), f) : 0;
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  KILN_CHECK(got == buf.size(), "read error on ", path, ": got ", got, " of ", n, " bytes",
             err ? std::string(": ") + std::strerror(err) : std::string());
}

namespace {
thread_local std::vector<uint8_t> t_file_buf;
}

void load_image(const std::string& path, const DecodeOptions& o, Image& out) {
  read_whole_file(path, t_file_buf);
  decode_image(t_file_buf.data(), t_file_buf.size(), path, o, out);
}

bool load_image_region(const std::string& path, const DecodeOptions& o,
                       const std::function<CropBox(int64_t, int64_t)>& choose, Image& out, CropBox& box) {
  read_whole_file(path, t_file_buf);
  const ImageHeader h = checked_header(t_file_buf.data(), t_file_buf.size(), path, o);
  if (h.format != ImageFormat::jpeg) return false;
  const CropBox want = choose(h.height, h.width);
  return decode_jpeg_region(t_file_buf.data(), t_file_buf.size(), path, o, h, want, out, box);
}

}  // namespace kiln
