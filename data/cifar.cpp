// CIFAR-10/100 binary reader (see cifar.h).
#include "data/cifar.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/check.h"
#include "data/file_io.h"

namespace kiln {

namespace {
constexpr int64_t kPixels = 32 * 32;
constexpr int64_t kImageBytes = 3 * kPixels;
}  // namespace

CifarDataset::CifarDataset(CifarKind kind, const std::vector<std::string>& files, std::string name)
    : kind_(kind), name_(std::move(name)) {
  KILN_CHECK(!files.empty(), name_, ": no files given");
  class_names_ = cifar_class_names(kind);
  const int64_t label_bytes = kind == CifarKind::cifar10 ? 1 : 2;
  const int64_t record = label_bytes + kImageBytes;
  const int64_t classes = num_classes();
  for (const std::string& f : files) {
    std::vector<uint8_t> bytes = read_file_bytes(f);
    const int64_t size = static_cast<int64_t>(bytes.size());
    KILN_CHECK(size > 0 && size % record == 0, f, ": ", size, " bytes is not a whole number of ",
               kind == CifarKind::cifar10 ? "CIFAR-10" : "CIFAR-100", " records of ", record, " bytes (",
               label_bytes == 1 ? "1 label byte" : "2 label bytes", " + 3072 pixel bytes): truncated or not a ",
               kind == CifarKind::cifar10 ? "CIFAR-10" : "CIFAR-100", " binary file");
    const int64_t n = size / record;
    pixels_.resize(static_cast<size_t>((count_ + n) * kImageBytes));
    labels_.resize(static_cast<size_t>(count_ + n));
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* rec = bytes.data() + i * record;
      uint8_t label = rec[label_bytes - 1];  // CIFAR-100: the fine label follows the coarse one
      KILN_CHECK(label < classes, f, ": label ", int(label), " of record ", i, " is outside [0, ", classes, ")");
      labels_[static_cast<size_t>(count_ + i)] = label;
      const uint8_t* planes = rec + label_bytes;
      uint8_t* hwc = pixels_.data() + (count_ + i) * kImageBytes;
      for (int64_t p = 0; p < kPixels; ++p)
        for (int64_t c = 0; c < 3; ++c) hwc[p * 3 + c] = planes[c * kPixels + p];
    }
    count_ += n;
  }
}

std::shared_ptr<CifarDataset> CifarDataset::open(CifarKind kind, const std::string& root, Split split) {
  const bool ten = kind == CifarKind::cifar10;
  const std::string source = ten ? "cifar10" : "cifar100";
  KILN_CHECK(std::filesystem::is_directory(root), source, ": dataset folder ", root, " not found");
  std::vector<std::string> names;
  if (ten && split == Split::train)
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  else if (ten)
    names = {"test_batch.bin"};
  else
    names = {split == Split::train ? "train.bin" : "test.bin"};
  // Accept the archive's own folder below root as well as root itself.
  std::string dir = root;
  std::string sub = (std::filesystem::path(root) / (ten ? "cifar-10-batches-bin" : "cifar-100-binary")).string();
  if (!file_exists((std::filesystem::path(root) / names[0]).string()) && std::filesystem::is_directory(sub)) dir = sub;
  std::string what = source + " " + split_name(split);
  std::vector<std::string> files;
  for (const std::string& n : names) files.push_back(find_file(dir, {n}, what));
  auto ds = std::make_shared<CifarDataset>(kind, files, what + " (" + dir + ")");
  ds->class_names_ = read_cifar_class_names(kind, dir);
  return ds;
}

const std::vector<std::string>& cifar_class_names(CifarKind kind) {
  static const std::vector<std::string> ten = {"airplane", "automobile", "bird", "cat",  "deer",
                                               "dog",      "frog",       "horse", "ship", "truck"};
  // CIFAR-100's fine labels are numbered in alphabetical order.
  static const std::vector<std::string> hundred = [] {
    std::istringstream in(
      "apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly "
      "camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup "
      "dinosaur dolphin elephant flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower "
      "leopard lion lizard lobster man maple_tree motorcycle mountain mouse mushroom oak_tree orange "
      "orchid otter palm_tree pear pickup_truck pine_tree plain plate poppy porcupine possum rabbit "
      "raccoon ray road rocket rose sea seal shark shrew skunk skyscraper snail snake spider squirrel "
      "streetcar sunflower sweet_pepper table tank telephone television tiger tractor train trout tulip "
      "turtle wardrobe whale willow_tree wolf woman worm");
    return std::vector<std::string>(std::istream_iterator<std::string>(in), {});
  }();
  return kind == CifarKind::cifar10 ? ten : hundred;
}

std::vector<std::string> read_cifar_class_names(CifarKind kind, const std::string& folder) {
  const std::vector<std::string>& known = cifar_class_names(kind);
  std::ifstream in((std::filesystem::path(folder) / (kind == CifarKind::cifar10 ? "batches.meta.txt" : "fine_label_names.txt")));
  std::vector<std::string> names;
  for (std::string line; in && std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (!line.empty()) names.push_back(line);
  }
  return names.size() == known.size() ? names : known;
}

void CifarDataset::get_into(int64_t index, Sample& out) const {
  check_index(index);
  out.image.resize(32, 32, 3);
  std::copy_n(pixels_.data() + index * kImageBytes, kImageBytes, out.image.data());
  out.label = labels_[static_cast<size_t>(index)];
}

}  // namespace kiln
