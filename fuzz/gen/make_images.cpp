// Writes the encoded seed images of fuzz/corpus/image/ and the image bytes used in
// fuzz/corpus/image_list/ (fuzz/gen/make_corpus.py calls it): small JPEG, PNG, BMP and WebP files
// encoded by OpenCV, and damaged copies. Build and run:
//   g++ -O1 -std=c++20 -w fuzz/gen/make_images.cpp $(pkg-config --cflags --libs opencv4) -o /tmp/mk && /tmp/mk OUT_DIR
#include <fstream>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>

static void put(const std::string& path, const std::vector<uchar>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

int main(int argc, char** argv) {
  const std::string out = argc > 1 ? argv[1] : ".";
  cv::Mat img(12, 17, CV_8UC3);
  for (int y = 0; y < img.rows; ++y)
    for (int x = 0; x < img.cols; ++x) img.at<cv::Vec3b>(y, x) = cv::Vec3b(uchar(x * 15), uchar(y * 20), uchar((x + y) * 7));
  cv::Mat grey(9, 9, CV_8UC1);
  for (int y = 0; y < 9; ++y)
    for (int x = 0; x < 9; ++x) grey.at<uchar>(y, x) = uchar(x * y * 3);
  struct Enc { const char* name; const char* ext; std::vector<int> params; const cv::Mat* m; };
  const Enc encs[] = {
      {"rgb", ".jpg", {cv::IMWRITE_JPEG_QUALITY, 80}, &img},
      {"progressive", ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1}, &img},
      {"restart", ".jpg", {cv::IMWRITE_JPEG_RST_INTERVAL, 1}, &img},
      {"grey", ".jpg", {}, &grey},
      {"rgb", ".png", {}, &img},
      {"grey", ".png", {}, &grey},
      {"rgb", ".bmp", {}, &img},
      {"rgb", ".webp", {cv::IMWRITE_WEBP_QUALITY, 90}, &img},
      {"lossless", ".webp", {cv::IMWRITE_WEBP_QUALITY, 101}, &grey},
  };
  for (const Enc& e : encs) {
    std::vector<uchar> b;
    cv::imencode(e.ext, *e.m, b, e.params);
    const std::string base = out + "/" + e.name + std::string(e.ext).replace(0, 1, "_");
    put(base, b);
    std::vector<uchar> cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(b.size() * 2 / 3));
    put(base + "_truncated", cut);
  }
  return 0;
}
