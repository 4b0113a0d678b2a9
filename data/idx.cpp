// IDX reader (see idx.h). Header: 2 zero bytes, a type byte (0x08 = unsigned byte), the number of
// dimensions, then each dimension as a big-endian uint32; the data follows in row-major order.
#include "data/idx.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/check.h"
#include "data/file_io.h"

namespace kiln {

namespace {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // header stripped
};

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

uint32_t be32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 | static_cast<uint32_t>(p[2]) << 8 | p[3];
}

// Throws unless d[0, n) starts with the magic number of an IDX file of unsigned bytes with one of
// the accepted dimension counts; `what` describes the expected content ("images", "labels").
void check_idx_magic(const std::string& path, const uint8_t* d, size_t n, const std::vector<int>& accepted_ndims,
                     const char* what) {
  std::string accepted;
  for (int nd : accepted_ndims) accepted += (accepted.empty() ? "" : " or ") + hex32(0x0800u + static_cast<uint32_t>(nd));
  KILN_CHECK(n >= 4, path, ": not an IDX ", what, " file: ", n, " bytes, shorter than the 4-byte magic number ",
             accepted);
  bool nd_ok = false;
  for (int a : accepted_ndims) nd_ok |= d[3] == a;
  KILN_CHECK(d[0] == 0 && d[1] == 0 && d[2] == 0x08 && nd_ok, path, ": not an IDX ", what, " file: magic number ",
             hex32(be32(d)), ", expected ", accepted, " (type 0x08 = unsigned byte, last byte = number of dimensions)");
}

// Reads an IDX file of unsigned bytes with one of the accepted dimension counts.
IdxArray read_idx(const std::string& path, const std::vector<int>& accepted_ndims, const char* what) {
  // A .gz file inflates no further than the size its header declares (a gzip bomb stops there).
  const ContentBound declared = [&](const uint8_t* d, size_t n) -> uint64_t {
    if (n < 4) return 0;
    check_idx_magic(path, d, n, accepted_ndims, what);
    const size_t header = 4 + 4 * size_t{d[3]};
    if (n < header) return 0;
    uint64_t total = 1;
    for (size_t k = 0; k < d[3]; ++k) {
      const uint64_t dim = be32(d + 4 + 4 * k);
      if (dim != 0 && total > (uint64_t{1} << 40) / dim) return uint64_t{1} << 40;  // more than any file holds
      total *= dim;
    }
    return header + total;
  };
  std::vector<uint8_t> bytes = read_file_bytes(path, declared);
  check_idx_magic(path, bytes.data(), bytes.size(), accepted_ndims, what);
  const int nd = bytes[3];
  size_t header = 4 + 4 * static_cast<size_t>(nd);
  KILN_CHECK(bytes.size() >= header, path, ": truncated IDX header: ", bytes.size(), " bytes, the ", nd,
             " dimensions need ", header);
  IdxArray a;
  uint64_t n = 1;
  for (int d = 0; d < nd; ++d) a.dims.push_back(be32(bytes.data() + 4 + 4 * d));
  for (int64_t d : a.dims) {
    // Bound the product before it can overflow: no real file holds 2^40 bytes.
    KILN_CHECK(d == 0 || n <= (uint64_t{1} << 40) / static_cast<uint64_t>(d), path, ": IDX dimensions ",
               shape_str(a.dims), " are implausibly large");
    n *= static_cast<uint64_t>(d);
  }
  uint64_t expected = header + n;
  KILN_CHECK(bytes.size() >= expected, path, ": truncated ", what, " data: dimensions ", shape_str(a.dims), " need ",
             expected, " bytes with the header, the file has ", bytes.size());
  KILN_CHECK(bytes.size() == expected, path, ": ", bytes.size() - expected, " bytes after the ", what,
             " data (dimensions ", shape_str(a.dims), " make ", expected, " bytes with the header)");
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

}  // namespace

IdxDataset::IdxDataset(const std::string& images_file, const std::string& labels_file, int64_t num_classes,
                       std::string name)
    : images_file_(images_file), labels_file_(labels_file), name_(std::move(name)), num_classes_(num_classes) {
  KILN_CHECK(num_classes > 0 && num_classes <= 256, name_, ": num_classes must be in [1, 256], got ", num_classes);
  IdxArray images = read_idx(images_file, {3, 4}, "images");
  IdxArray labels = read_idx(labels_file, {1}, "labels");
  count_ = images.dims[0];
  shape_ = {images.dims[1], images.dims[2], images.dims.size() == 4 ? images.dims[3] : 1};
  KILN_CHECK(shape_.known(), images_file, ": empty image dimensions ", shape_str(images.dims));
  KILN_CHECK(labels.dims[0] == count_, name_, ": ", labels_file, " has ", labels.dims[0], " labels but ", images_file,
             " has ", count_, " images");
  for (int64_t i = 0; i < count_; ++i)
    KILN_CHECK(labels.data[i] < num_classes_, labels_file, ": label ", int(labels.data[i]), " of sample ", i,
               " is outside [0, ", num_classes_, ")");
  pixels_ = std::move(images.data);
  labels_ = std::move(labels.data);
}

std::shared_ptr<IdxDataset> IdxDataset::open(const std::string& root, Split split, const std::string& name) {
  KILN_CHECK(std::filesystem::is_directory(root), name, ": dataset folder ", root, " not found");
  std::string prefix = split == Split::train ? "train" : "t10k";
  std::string what = name + " " + split_name(split);
  std::string images = find_file(root, {prefix + "-images-idx3-ubyte.gz", prefix + "-images-idx3-ubyte",
                                        prefix + "-images.idx3-ubyte"}, what + " images");
  std::string labels = find_file(root, {prefix + "-labels-idx1-ubyte.gz", prefix + "-labels-idx1-ubyte",
                                        prefix + "-labels.idx1-ubyte"}, what + " labels");
  auto ds = std::make_shared<IdxDataset>(images, labels, 10, what + " (" + root + ")");
  if (name == "fashion_mnist") ds->class_names_ = fashion_mnist_class_names();
  return ds;
}

std::vector<std::string> IdxDataset::class_names() const {
  return class_names_.empty() ? Dataset::class_names() : class_names_;
}

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

void IdxDataset::get_into(int64_t index, Sample& out) const {
  check_index(index);
  out.image.resize(shape_.h, shape_.w, shape_.c);
  const int64_t n = shape_.numel();
  std::copy_n(pixels_.data() + index * n, n, out.image.data());
  out.label = labels_[static_cast<size_t>(index)];
}

}  // namespace kiln
