// The Dataset interface: a fixed number of samples, each a uint8 image in HWC order plus an int64
// class label. Sources (data/idx.h, data/cifar.h, data/synthetic.h, later an ImageFolder of JPEGs)
// decode into an `Image`; transforms (data/transform.h) reshape it; the loader (data/loader.h)
// calls get_into() from several worker threads at once, so sources must be safe for concurrent
// const calls. Tests: tests/data/sources_test.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln {

// Height, width, channels of an image. A zero height or width means "varies from sample to
// sample" (decoded JPEGs); transforms that produce a fixed size turn it into a known shape.
struct ImageShape {
  int64_t h = 0, w = 0, c = 0;
  bool known() const { return h > 0 && w > 0 && c > 0; }
  int64_t numel() const { return h * w * c; }
  bool operator==(const ImageShape&) const = default;
  std::string str() const;  // "28x28x1", "?x?x3"
};

// A uint8 image, rows of pixels with interleaved channels (HWC). The byte buffer only grows, so
// a worker reusing one Image per thread stops allocating after the first few samples.
struct Image {
  int64_t h = 0, w = 0, c = 0;
  std::vector<uint8_t> bytes;  // at least h*w*c; the first h*w*c are the pixels

  void resize(int64_t height, int64_t width, int64_t channels) {
    h = height;
    w = width;
    c = channels;
    if (bytes.size() < static_cast<size_t>(h * w * c)) bytes.resize(static_cast<size_t>(h * w * c));
  }
  ImageShape shape() const { return {h, w, c}; }
  int64_t numel() const { return h * w * c; }
  uint8_t* data() { return bytes.data(); }
  const uint8_t* data() const { return bytes.data(); }
  uint8_t at(int64_t y, int64_t x, int64_t ch) const { return bytes[static_cast<size_t>((y * w + x) * c + ch)]; }
};

// A box in an image: rows [top, top + h), columns [left, left + w).
struct CropBox {
  int64_t top = 0, left = 0, h = 0, w = 0;
  bool operator==(const CropBox&) const = default;
};

// What a first crop needs of a source (Dataset::get_region_into): the box of the full image, and
// the size it will be resized to (0 x 0: unknown or not to be relied on, decode at full scale).
// Knowing the size, a JPEG source may decode the box at a reduced DCT scale that keeps at least
// out_h x out_w pixels (data/image_decode.h, region_scale).
struct RegionWant {
  CropBox box;
  int64_t out_h = 0, out_w = 0;
  RegionWant(CropBox b = {}, int64_t h = 0, int64_t w = 0) : box(b), out_h(h), out_w(w) {}  // implicit from a box
};

struct Sample {
  Image image;
  int64_t label = 0;
};

// "0", "1", ..., "k-1": the class names of a source that knows none.
std::vector<std::string> numbered_class_names(int64_t k);

// Which part of a dataset: `train`, or `val` (the test files of MNIST/CIFAR, which serve as the
// validation set).
enum class Split { train, val };
const char* split_name(Split s);

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t num_classes() const = 0;
  // The shape every image has, or h = w = 0 when it varies (see ImageShape).
  virtual ImageShape image_shape() const = 0;
  // Names the source for messages: "fashion_mnist train (/usr/share/datasets/fashion-mnist)".
  virtual std::string name() const = 0;
  // Decodes sample `index` into `out`, reusing its buffer. Safe to call from several threads at
  // once. Throws kiln::Error naming the file and index for a bad sample or an index out of range.
  virtual void get_into(int64_t index, Sample& out) const = 0;
  // The name of each class, indexed by label (num_classes() of them): the class folders of an
  // image folder, "T-shirt/top".."Ankle boot" for Fashion-MNIST, "airplane".."truck" for CIFAR-10;
  // by default the labels as numbers "0".."k-1". Every run saves them as runs/<name>/classes.json.
  virtual std::vector<std::string> class_names() const;

  // Region decoding (optional): loads only the part of sample `index` that the first transform
  // uses. `choose` gets the full image's (height, width) from the file's header and returns the
  // box the transform will crop (and the size it resizes it to, RegionWant); the source decodes a
  // region holding at least that box into `out` and sets `box` to where the box lies in out.image
  // (in scaled pixels when the source decoded at a reduced scale: then the box is at least
  // out_h x out_w). Returns false when it cannot (then the caller uses get_into()). The default
  // cannot. Used by the loader for RandomResizedCrop on JPEGs.
  using ChooseBox = std::function<RegionWant(int64_t height, int64_t width)>;
  virtual bool get_region_into(int64_t index, const ChooseBox& choose, Sample& out, CropBox& box) const {
    return false;
  }

  Sample get(int64_t index) const {
    Sample s;
    get_into(index, s);
    return s;
  }

 protected:
  // Throws "<name>: sample index i out of range [0, size)".
  void check_index(int64_t index) const;
};

}  // namespace kiln
