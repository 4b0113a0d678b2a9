// Datasets of encoded image files (JPEG, PNG, BMP, WebP), decoded per sample by
// data/image_decode.h:
//   ImageFolder  root/<class>/**/<file>.{jpg,jpeg,png,bmp,webp} (extension case-insensitive), as
//                torchvision's ImageFolder: classes are the sub-folders sorted by name (label = rank),
//                files are found recursively and ordered as sorted(os.walk(class folder)) gives them
//                (by folder, then by file name; byte-wise order).
//   list file    one "<path> <label>" per line; the label is the last whitespace-separated field,
//                the path the rest (so it may hold spaces); a relative path is relative to the list
//                file's folder; blank lines and lines starting with '#' are skipped, but for one
//                "# classes: [\"cat\", \"dog\"]" line (a JSON list of strings), which names the
//                classes by label (then num_classes defaults to their count).
//   ImageNet as downloaded (Kaggle's ILSVRC layout; docs/data.md, "ImageNet as downloaded"):
//                open_labelled_folder(): a flat val/ folder labelled by a CSV of
//                "ImageId,PredictionString" lines (LOC_val_solution.csv, the wnid first), and
//                read_class_names_file(): the class names of the wnid folders from a
//                "<wnid> <name>, <name>" file (LOC_synset_mapping.txt).
// Both read only names at open time; a missing, damaged or non-regular (FIFO, directory) image is an
// error (naming the file) when its sample is loaded, which the loader can skip (data.skip_bad_samples, data/loader.h).
// The index is packed (ImageFileIndex): ImageNet's 1.28M training files take ~45 bytes each.
// Tests: tests/data/image_file_test.cpp, tests/data/imagenet_layout_test.cpp.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"
#include "data/image_decode.h"

namespace kiln {

struct ImageFileEntry {
  std::string path;
  int64_t label = 0;
};

// The paths and labels of a split, packed: a prefix shared by every path (the split's folder) and the
// rest of each path back to back in one string, so that an entry costs its relative path's bytes
// plus 12, not a std::string (32 bytes) and its heap block (the whole path, ~100 bytes for ImageNet).
class ImageFileIndex {
 public:
  explicit ImageFileIndex(std::string prefix = "") : prefix_(std::move(prefix)) {}
  // Appends prefix + rest with `label` (in [0, 2^31)).
  void add(std::string_view rest, int64_t label);
  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  std::string path(int64_t i) const;
  int64_t label(int64_t i) const { return labels_[static_cast<size_t>(i)]; }
  // The bytes the index holds (its buffers' capacity).
  size_t bytes() const;
  void shrink_to_fit();

 private:
  std::string prefix_, pool_;
  std::vector<uint64_t> ends_;  // path i is prefix_ + pool_[ends_[i - 1], ends_[i])
  std::vector<int32_t> labels_;
};

class ImageFileDataset : public Dataset {
 public:
  // `classes` may be empty (a list file names no classes); labels must lie in [0, num_classes).
  ImageFileDataset(std::vector<ImageFileEntry> entries, std::vector<std::string> classes, int64_t num_classes,
                   DecodeOptions decode, std::string name);
  ImageFileDataset(ImageFileIndex index, std::vector<std::string> classes, int64_t num_classes, DecodeOptions decode,
                   std::string name);

  // Scans `folder` (see above). Errors name the folder: missing, no class folders, a class folder
  // without images (listing the accepted extensions).
  // `classes` non-empty: the class list to label with (the training split's, so that val/ labels
  // agree with train/ even when val/ lacks a class); a class folder not in it is an error, a class
  // of it without a folder simply has no samples.
  static std::shared_ptr<ImageFileDataset> open_folder(const std::string& folder, DecodeOptions decode,
                                                       const std::string& name,
                                                       const std::vector<std::string>& classes = {});
  // The class folders of `folder`, sorted by name (as torchvision's find_classes); empty when the
  // folder does not exist.
  static std::vector<std::string> class_folders(const std::string& folder);
  // Reads the list file. num_classes 0 = 1 + the largest label. Errors name the file and line.
  static std::shared_ptr<ImageFileDataset> open_list(const std::string& list_file, int64_t num_classes,
                                                     DecodeOptions decode, const std::string& name);
  // A flat `folder` of images (ImageNet's val/: ILSVRC2012_val_00000001.JPEG ...) labelled by
  // `labels_csv`: an optional "ImageId,PredictionString" header, then one "<image id>,<wnid> ..."
  // line per image (LOC_val_solution.csv; what follows the wnid, the boxes, is ignored). The image id
  // is the file name without its extension; the label is the wnid's index in `classes` (the training
  // split's class folders, sorted). Files are ordered by name. Errors (file:line): a line without
  // "<id>,<wnid>", a wnid that is not one of `classes`, an id listed twice; then, counted with the
  // first 5 named, the listed images missing from the folder and the folder's images the file does
  // not list. Two files of one id (x.JPEG, x.png) are an error; sub-folders and files of other
  // extensions are ignored.
  static std::shared_ptr<ImageFileDataset> open_labelled_folder(const std::string& folder, const std::string& labels_csv,
                                                                DecodeOptions decode, const std::string& name,
                                                                const std::vector<std::string>& classes);

  int64_t size() const override { return index_.size(); }
  int64_t num_classes() const override { return num_classes_; }
  // The names set_class_names() gave, else the class folders (image folder) or the list file's
  // "# classes:" line; else numbers.
  std::vector<std::string> class_names() const override;
  // Names the classes (one a class, in label order) for class_names() only: labels and classes()
  // stay the folders' (read_class_names_file()).
  void set_class_names(std::vector<std::string> names);
  ImageShape image_shape() const override { return {0, 0, decode_.channels}; }
  std::string name() const override { return name_; }
  void get_into(int64_t index, Sample& out) const override;
  // JPEGs only (load_image_region, data/image_decode.h); false for other formats.
  bool get_region_into(int64_t index, const ChooseBox& choose, Sample& out, CropBox& box) const override;

  ImageFileEntry entry(int64_t i) const { return {index_.path(i), index_.label(i)}; }
  const std::vector<std::string>& classes() const { return classes_; }
  const DecodeOptions& decode_options() const { return decode_; }
  // The bytes the index of names and labels holds.
  size_t index_bytes() const { return index_.bytes(); }

 private:
  ImageFileIndex index_;
  std::vector<std::string> classes_;
  std::vector<std::string> names_;  // set_class_names()
  int64_t num_classes_ = 0;
  DecodeOptions decode_;
  std::string name_;
};

// A list file (see above), read without opening the images. With `labels` false a line may also be
// a bare image path (label -1): `kiln predict`'s input lists. Errors name file:line.
struct ImageList {
  std::vector<ImageFileEntry> entries;  // relative paths made relative to the list file's folder
  std::vector<std::string> classes;     // the "# classes:" line's names (empty without one)
  std::vector<int64_t> lines;           // the line number of each entry, for messages
};
ImageList read_image_list(const std::string& list_file, bool labels = true);

// The class names of `classes` (wnids) from `file`: one "<wnid> <name>[, <name> ...]" line a class
// (ImageNet's LOC_synset_mapping.txt: "n01440764 tench, Tinca tinca"); a class's name is its first
// name ("tench"). Blank lines are skipped; lines of wnids that are not in `classes` are allowed (a
// subset of ImageNet's classes). Errors name the file and line: a line without a name, a wnid given
// twice; and a class without a line (counted, the first 5 named).
std::vector<std::string> read_class_names_file(const std::string& file, const std::vector<std::string>& classes);

// True for the file names ImageFolder accepts: .jpg .jpeg .png .bmp .webp, any case.
bool is_image_file_name(const std::string& name);

}  // namespace kiln
