// ImageFolder and list-file datasets (see image_folder.h).
#include "data/image_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/check.h"
#include "core/json_util.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {
const char* kExtensions = ".jpg, .jpeg, .png, .bmp, .webp";
// The largest label a list file may name, exclusive: 2^24 classes (ImageNet-21k has 21,841). A
// label beyond it is a typo or a damaged file, and would size the classifier's last layer.
constexpr int64_t kMaxLabels = int64_t{1} << 24;
}

bool is_image_file_name(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == "jpg" || ext == "jpeg" || ext == "png" || ext == "bmp" || ext == "webp";
}

void ImageFileIndex::add(std::string_view rest, int64_t label) {
  KILN_CHECK(label >= 0 && label <= INT32_MAX, "image index: label ", label, " of ", prefix_, rest, " is out of range");
  pool_.append(rest);
  ends_.push_back(pool_.size());
  labels_.push_back(static_cast<int32_t>(label));
}

std::string ImageFileIndex::path(int64_t i) const {
  const size_t k = static_cast<size_t>(i), begin = k == 0 ? 0 : ends_[k - 1];
  std::string p;
  p.reserve(prefix_.size() + (ends_[k] - begin));
  p.append(prefix_).append(pool_, begin, ends_[k] - begin);
  return p;
}

size_t ImageFileIndex::bytes() const {
  return prefix_.capacity() + pool_.capacity() + ends_.capacity() * sizeof(uint64_t) +
         labels_.capacity() * sizeof(int32_t);
}

void ImageFileIndex::shrink_to_fit() {
  pool_.shrink_to_fit();
  ends_.shrink_to_fit();
  labels_.shrink_to_fit();
}

namespace {
ImageFileIndex index_of(const std::vector<ImageFileEntry>& entries, const std::string& name, int64_t num_classes) {
  ImageFileIndex index;
  for (const auto& e : entries) {
    KILN_CHECK(e.label >= 0 && e.label < num_classes, name, ": ", e.path, " has label ", e.label, ", outside [0, ",
               num_classes, ")");
    index.add(e.path, e.label);
  }
  index.shrink_to_fit();
  return index;
}
}  // namespace

ImageFileDataset::ImageFileDataset(std::vector<ImageFileEntry> entries, std::vector<std::string> classes,
                                   int64_t num_classes, DecodeOptions decode, std::string name)
    : ImageFileDataset(index_of(entries, name, num_classes), std::move(classes), num_classes, decode, name) {}

ImageFileDataset::ImageFileDataset(ImageFileIndex index, std::vector<std::string> classes, int64_t num_classes,
                                   DecodeOptions decode, std::string name)
    : index_(std::move(index)), classes_(std::move(classes)), num_classes_(num_classes), decode_(decode),
      name_(std::move(name)) {
  KILN_CHECK(num_classes_ > 0, name_, ": no classes");
  for (int64_t i = 0; i < index_.size(); ++i)
    KILN_CHECK(index_.label(i) < num_classes_, name_, ": ", index_.path(i), " has label ", index_.label(i),
               ", outside [0, ", num_classes_, ")");
}

std::vector<std::string> ImageFileDataset::class_folders(const std::string& folder) {
  std::vector<std::string> classes;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return classes;
  for (const auto& d : fs::directory_iterator(folder, fs::directory_options::follow_directory_symlink))
    if (d.is_directory()) classes.push_back(d.path().filename().string());
  std::sort(classes.begin(), classes.end());
  return classes;
}

std::shared_ptr<ImageFileDataset> ImageFileDataset::open_folder(const std::string& folder, DecodeOptions decode,
                                                                const std::string& name,
                                                                const std::vector<std::string>& given_classes) {
  std::error_code ec;
  KILN_CHECK(fs::is_directory(folder, ec), name, ": no folder ", folder,
             " (an image folder holds one sub-folder of images per class: ", folder, "/<class>/<image>.jpg)");
  const std::vector<std::string> found = class_folders(folder);
  KILN_CHECK(!found.empty(), name, ": ", folder, " holds no class folders; expected ", folder,
             "/<class>/<image> with images named *", kExtensions);
  const bool fixed = !given_classes.empty();
  std::vector<std::string> classes = fixed ? given_classes : found;
  if (fixed) {
    for (const std::string& c : found)
      KILN_CHECK(std::binary_search(classes.begin(), classes.end(), c), name, ": class folder ",
                 (fs::path(folder) / c).string(), " is not one of the ", classes.size(),
                 " classes of the training split (", classes.front(), " ... ", classes.back(),
                 "); val/ must use train/'s class names");
  }
  // Paths are stored relative to the folder (ImageFileIndex); the iterator's paths start with it.
  const std::string prefix = (fs::path(folder) / "").string();
  ImageFileIndex index(prefix);
  std::vector<std::pair<std::string, std::string>> files;  // (folder, file name): os.walk's sorted order
  for (size_t c = 0; c < classes.size(); ++c) {
    const fs::path dir = fs::path(folder) / classes[c];
    if (fixed && !fs::is_directory(dir, ec)) continue;  // a class the split has no images of
    files.clear();
    for (const auto& f : fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink)) {
      if (f.is_directory()) continue;
      const std::string fname = f.path().filename().string();
      if (is_image_file_name(fname)) files.emplace_back(f.path().parent_path().string(), fname);
    }
    KILN_CHECK(!files.empty(), name, ": class folder ", dir.string(), " holds no images; accepted extensions: ",
               kExtensions, " (any case)");
    std::sort(files.begin(), files.end());
    for (auto& [d, f] : files) {
      KILN_CHECK(d.compare(0, prefix.size(), prefix) == 0, name, ": ", d, " is not under ", prefix);
      const std::string rest = d.substr(prefix.size()) + "/" + f;
      index.add(rest, static_cast<int64_t>(c));
    }
  }
  index.shrink_to_fit();
  const int64_t k = static_cast<int64_t>(classes.size());
  return std::make_shared<ImageFileDataset>(std::move(index), std::move(classes), k, decode, name);
}

ImageList read_image_list(const std::string& list_file, bool labels) {
  std::ifstream in(list_file);
  KILN_CHECK(in, "cannot open the list file ", list_file);
  const fs::path base = fs::path(list_file).parent_path();
  const std::string classes_tag = "# classes:";
  ImageList list;
  std::string line;
  for (int64_t no = 1; std::getline(in, line); ++no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line.compare(first, classes_tag.size(), classes_tag) == 0) {
      KILN_CHECK(list.classes.empty(), list_file, ":", no, ": a second \"", classes_tag, "\" line");
      Json names;
      try {
        names = Json::parse(line.substr(first + classes_tag.size()));
      } catch (const Json::exception&) {
      }
      bool ok = names.is_array() && !names.empty();
      for (const Json& n : names) ok = ok && n.is_string() && !n.get<std::string>().empty();
      KILN_CHECK(ok, list_file, ":", no, ": expected ", classes_tag, " followed by a JSON list of class names, e.g. ",
                 classes_tag, " [\"cat\", \"dog\"]");
      for (const Json& n : names) list.classes.push_back(n.get<std::string>());
      continue;
    }
    if (first == std::string::npos || line[first] == '#') continue;
    const auto last = line.find_last_not_of(" \t");
    const std::string s = line.substr(first, last - first + 1);
    std::string path = s;
    int64_t label = -1;
    if (labels || !is_image_file_name(s)) {
      const auto sep = s.find_last_of(" \t");
      KILN_CHECK(sep != std::string::npos, list_file, ":", no, ": expected \"<path> <label>\"",
                 labels ? "" : " or an image path", ", got \"", s, "\"");
      const std::string label_text = s.substr(sep + 1);
      path = s.substr(0, s.find_last_not_of(" \t", sep) + 1);
      size_t used = 0;
      try {
        label = std::stoll(label_text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      KILN_CHECK(used == label_text.size() && used > 0, list_file, ":", no, ": the label \"", label_text,
                 "\" is not a whole number; expected \"<path> <label>\"");
      KILN_CHECK(label >= 0 && label < kMaxLabels, list_file, ":", no, ": label ", label,
                 " is out of range; accepted: 0 .. ", kMaxLabels - 1);
    }
    KILN_CHECK(is_image_file_name(path), list_file, ":", no, ": ", path, " is not an image file name; accepted extensions: ",
               kExtensions);
    if (fs::path(path).is_relative()) path = (base / path).string();
    list.entries.push_back({std::move(path), label});
    list.lines.push_back(no);
  }
  return list;
}

std::shared_ptr<ImageFileDataset> ImageFileDataset::open_list(const std::string& list_file, int64_t num_classes,
                                                              DecodeOptions decode, const std::string& name) {
  KILN_CHECK(std::ifstream(list_file), name, ": cannot open the list file ", list_file);
  ImageList list = read_image_list(list_file);
  KILN_CHECK(!list.entries.empty(), name, ": the list file ", list_file, " names no images (expected lines \"<path> <label>\")");
  const int64_t named = static_cast<int64_t>(list.classes.size());
  KILN_CHECK(named == 0 || num_classes <= 0 || named == num_classes, list_file, ": its \"# classes:\" line names ",
             named, " classes but data.num_classes = ", num_classes);
  const int64_t bound = num_classes > 0 ? num_classes : named;
  int64_t max_label = -1;
  for (size_t i = 0; i < list.entries.size(); ++i) {
    const ImageFileEntry& e = list.entries[i];
    KILN_CHECK(bound <= 0 || e.label < bound, list_file, ":", list.lines[i], ": label ", e.label,
               " is out of range; accepted: 0 .. ", bound - 1,
               num_classes > 0 ? " (data.num_classes = " + std::to_string(num_classes) + ")"
                               : " (the \"# classes:\" line names " + std::to_string(named) + ")");
    max_label = std::max(max_label, e.label);
  }
  const int64_t k = bound > 0 ? bound : max_label + 1;
  return std::make_shared<ImageFileDataset>(std::move(list.entries), std::move(list.classes), k, decode, name);
}

namespace {
std::string trim(std::string_view s) {
  const auto a = s.find_first_not_of(" \t");
  if (a == std::string_view::npos) return "";
  return std::string(s.substr(a, s.find_last_not_of(" \t") - a + 1));
}

// "a, b, c (and 7 more)": the first 5 of `items`.
std::string first_few(const std::vector<std::string>& items) {
  constexpr size_t kShown = 5;
  std::string out;
  for (size_t i = 0; i < items.size() && i < kShown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kShown) out += " (and " + std::to_string(items.size() - kShown) + " more)";
  return out;
}

// The line without its "\r" (the Kaggle files are written with "\n", but a copy may not be).
std::istream& read_line(std::istream& in, std::string& line) {
  if (std::getline(in, line) && !line.empty() && line.back() == '\r') line.pop_back();
  return in;
}
}  // namespace

std::shared_ptr<ImageFileDataset> ImageFileDataset::open_labelled_folder(const std::string& folder,
                                                                         const std::string& labels_csv,
                                                                         DecodeOptions decode, const std::string& name,
                                                                         const std::vector<std::string>& classes) {
  std::error_code ec;
  KILN_CHECK(!classes.empty(), name, ": no classes to label ", folder, " with (the training split has no class folders)");
  KILN_CHECK(fs::is_directory(folder, ec), name, ": no folder ", folder, " (with data.val_labels the split is one flat ",
             "folder of images, ", folder, "/<image id>.JPEG, labelled by ", labels_csv, ")");
  std::vector<std::string> files;  // the folder's image files, by name
  int64_t folders = 0;
  for (const auto& f : fs::directory_iterator(folder, fs::directory_options::follow_directory_symlink)) {
    if (f.is_directory()) {
      ++folders;
      continue;
    }
    std::string fname = f.path().filename().string();
    if (is_image_file_name(fname)) files.push_back(std::move(fname));
  }
  KILN_CHECK(!files.empty(), name, ": ", folder, " holds no images (accepted extensions: ", kExtensions,
             "); with data.val_labels the split is one flat folder of images labelled by ", labels_csv,
             folders > 0 ? " (it holds " + std::to_string(folders) + " sub-folders: for val/<class>/<image> leave out data.val_labels)"
                         : std::string());
  std::sort(files.begin(), files.end());
  std::unordered_map<std::string_view, size_t> by_id;  // image id (the name without its extension) -> file
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string_view id = std::string_view(files[i]).substr(0, files[i].rfind('.'));
    auto [it, added] = by_id.emplace(id, i);
    KILN_CHECK(added, name, ": two images of id ", id, " in ", folder, ": ", files[it->second], " and ", files[i],
               "; ", labels_csv, " labels an image by its name without the extension");
  }

  std::ifstream in(labels_csv);
  KILN_CHECK(in, name, ": cannot open the labels file ", labels_csv,
             " (data.val_labels: \"ImageId,PredictionString\" lines, as ImageNet's LOC_val_solution.csv)");
  std::vector<int64_t> label(files.size(), -1), line_of(files.size(), 0);
  std::vector<std::string> missing;  // "file:line id"
  std::string line;
  for (int64_t no = 1; read_line(in, line); ++no) {
    if (no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
    if (trim(line).empty() || (no == 1 && line.rfind("ImageId,", 0) == 0)) continue;
    const auto comma = line.find(',');
    const std::string id = comma == std::string::npos ? "" : trim(std::string_view(line).substr(0, comma));
    std::istringstream rest(comma == std::string::npos ? "" : line.substr(comma + 1));
    std::string wnid;
    rest >> wnid;
    KILN_CHECK(!id.empty() && !wnid.empty(), labels_csv, ":", no, ": expected \"<image id>,<wnid> ...\" ",
               "(ImageId,PredictionString, e.g. \"ILSVRC2012_val_00000001,n01751748 111 108 397 351\"), got \"",
               line.substr(0, 80), "\"");
    const auto c = std::lower_bound(classes.begin(), classes.end(), wnid);
    KILN_CHECK(c != classes.end() && *c == wnid, labels_csv, ":", no, ": class ", wnid, " of image ", id,
               " is not one of the ", classes.size(), " class folders of the training split (", classes.front(), " ... ",
               classes.back(), ")");
    const auto f = by_id.find(id);
    if (f == by_id.end()) {
      missing.push_back(labels_csv + ":" + std::to_string(no) + " " + id);
      continue;
    }
    KILN_CHECK(label[f->second] < 0, labels_csv, ":", no, ": image ", id, " is listed a second time (first on line ",
               line_of[f->second], ")");
    label[f->second] = c - classes.begin();
    line_of[f->second] = no;
  }
  KILN_CHECK(missing.empty(), name, ": ", missing.size(), " image(s) listed in ", labels_csv, " are not in ", folder,
             " (as <image id> and an image extension): ", first_few(missing));
  std::vector<std::string> unlisted;
  for (size_t i = 0; i < files.size(); ++i)
    if (label[i] < 0) unlisted.push_back(files[i]);
  KILN_CHECK(unlisted.empty(), name, ": ", unlisted.size(), " image(s) of ", folder, " are not listed in ", labels_csv,
             ": ", first_few(unlisted), "; each image needs a \"<image id>,<wnid> ...\" line");

  ImageFileIndex index((fs::path(folder) / "").string());
  for (size_t i = 0; i < files.size(); ++i) index.add(files[i], label[i]);
  index.shrink_to_fit();
  const int64_t k = static_cast<int64_t>(classes.size());
  return std::make_shared<ImageFileDataset>(std::move(index), classes, k, decode, name);
}

std::vector<std::string> read_class_names_file(const std::string& file, const std::vector<std::string>& classes) {
  std::ifstream in(file);
  KILN_CHECK(in, "cannot open the class names file ", file,
             " (data.class_names_file: \"<wnid> <name>, <name>\" lines, as ImageNet's LOC_synset_mapping.txt)");
  std::unordered_map<std::string, std::pair<std::string, int64_t>> named;  // wnid -> (first name, line)
  std::string line;
  for (int64_t no = 1; read_line(in, line); ++no) {
    if (no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    const std::string s = trim(line);
    if (s.empty()) continue;
    const auto sep = s.find_first_of(" \t");
    const std::string wnid = s.substr(0, sep);
    const std::string given = sep == std::string::npos ? "" : s.substr(sep + 1);  // "tench, Tinca tinca"
    const std::string first = trim(std::string_view(given).substr(0, given.find(',')));
    KILN_CHECK(!first.empty(), file, ":", no, ": expected \"<wnid> <name>[, <name> ...]\" (e.g. \"n01440764 tench, ",
               "Tinca tinca\"), got \"", s.substr(0, 80), "\"");
    auto [it, added] = named.emplace(wnid, std::pair{first, no});
    KILN_CHECK(added, file, ":", no, ": a second line for ", wnid, " (the first is line ", it->second.second, ")");
  }
  std::vector<std::string> names, unnamed;
  for (const std::string& c : classes) {
    const auto it = named.find(c);
    if (it == named.end()) unnamed.push_back(c);
    else names.push_back(it->second.first);
  }
  KILN_CHECK(unnamed.empty(), file, ": no line for ", unnamed.size(), " of the ", classes.size(),
             " class folders: ", first_few(unnamed), "; each class folder needs a \"<wnid> <name>\" line");
  return names;
}

std::vector<std::string> ImageFileDataset::class_names() const {
  if (!names_.empty()) return names_;
  return classes_.empty() ? Dataset::class_names() : classes_;
}

void ImageFileDataset::set_class_names(std::vector<std::string> names) {
  KILN_CHECK(static_cast<int64_t>(names.size()) == num_classes_, name_, ": ", names.size(), " class names for ",
             num_classes_, " classes");
  names_ = std::move(names);
}

void ImageFileDataset::get_into(int64_t index, Sample& out) const {
  check_index(index);
  load_image(index_.path(index), decode_, out.image);
  out.label = index_.label(index);
}

bool ImageFileDataset::get_region_into(int64_t index, const ChooseBox& choose, Sample& out, CropBox& box) const {
  check_index(index);
  if (!load_image_region(index_.path(index), decode_, choose, out.image, box)) return false;
  out.label = index_.label(index);
  return true;
}

}  // namespace kiln
