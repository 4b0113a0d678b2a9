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
// Both read only names at open time; a missing, damaged or non-regular (FIFO, directory) image is an
// error (naming the file) when its sample is loaded, which the loader can skip (data.skip_bad_samples, data/loader.h).
// Tests: tests/data/image_file_test.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_decode.h"

namespace kiln {

struct ImageFileEntry {
  std::string path;
  int64_t label = 0;
};

class ImageFileDataset : public Dataset {
 public:
  // `classes` may be empty (a list file names no classes); labels must lie in [0, num_classes).
  ImageFileDataset(std::vector<ImageFileEntry> entries, std::vector<std::string> classes, int64_t num_classes,
                   DecodeOptions decode, std::string name);

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

  int64_t size() const override { return static_cast<int64_t>(entries_.size()); }
  int64_t num_classes() const override { return num_classes_; }
  // The class folders (image folder) or the list file's "# classes:" line; else numbers.
  std::vector<std::string> class_names() const override;
  ImageShape image_shape() const override { return {0, 0, decode_.channels}; }
  std::string name() const override { return name_; }
  void get_into(int64_t index, Sample& out) const override;
  // JPEGs only (load_image_region, data/image_decode.h); false for other formats.
  bool get_region_into(int64_t index, const ChooseBox& choose, Sample& out, CropBox& box) const override;

  const ImageFileEntry& entry(int64_t i) const { return entries_[static_cast<size_t>(i)]; }
  const std::vector<std::string>& classes() const { return classes_; }
  const DecodeOptions& decode_options() const { return decode_; }

 private:
  std::vector<ImageFileEntry> entries_;
  std::vector<std::string> classes_;
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

// True for the file names ImageFolder accepts: .jpg .jpeg .png .bmp .webp, any case.
bool is_image_file_name(const std::string& name);

}  // namespace kiln
