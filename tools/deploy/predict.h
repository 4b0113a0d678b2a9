// Prediction: a trained model on image files, top-k classes with names and probabilities.
//
// A Predictor is loaded from a run folder (runs/<name>: its config.json, classes.json and the
// weights `kiln eval` takes from it: its best checkpoint, else its last) or from a config file plus a weights file
// (class names from the config's data source when it can be opened, else numbers). Images go
// through the config's VALIDATION transforms (data.val_transforms), decoded as the data source
// decodes (channels, max_image_pixels, reduced JPEG decoding), in batches, on the config's device
// (train.device) and precision, the model in eval mode. A file that cannot be read, decoded or
// transformed into the model's input shape fails alone: its Prediction carries the error.
//
// Class names: every run writes runs/<name>/classes.json, a JSON list of the names by label
// (Dataset::class_names(), data/dataset.h). The command is `kiln predict` (tools/cli/predict_cmd.cpp,
// docs/predict.md). Tests: tests/engine/predict_test.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/json_reader.h"
#include "data/config.h"
#include "data/image_decode.h"
#include "data/pipeline.h"
#include "layers/module.h"

namespace kiln {

// runs/<name>/classes.json: writes / reads a JSON list of non-empty strings. Reading names the file
// and what is wrong (not JSON, not a list of strings).
void save_class_names(const std::string& path, const std::vector<std::string>& names);
std::vector<std::string> load_class_names(const std::string& path);

struct PredictOptions {
  /// weights file or checkpoint; "" = the run folder's (required with a config file)
  std::string weights;
  /// images per forward pass; 0 = the config's validation batch, at most 256 (default 0)
  int64_t batch = 0;
  /// config overrides (key=value, as `kiln train` takes them: device=cpu, data.val_transforms=...)
  std::vector<std::string> overrides;
};

struct Prediction {
  std::string path;
  std::string error;              // non-empty: the file could not be predicted (names the file)
  std::vector<int64_t> index;     // top-k class indices, most probable first
  std::vector<double> prob;       // their softmax probabilities
  bool ok() const { return error.empty(); }
};

class Predictor {
 public:
  // RUN_OR_CONFIG: a run folder or a config file (then options.weights is required).
  Predictor(const std::string& run_or_config, const PredictOptions& options);

  // Predicts `paths` in batches; one Prediction per path, in order (failed ones carry their error).
  std::vector<Prediction> predict(const std::vector<std::string>& paths, int64_t topk) const;

  // One class name per model output.
  const std::vector<std::string>& class_names() const { return classes_; }
  int64_t batch_size() const { return batch_; }
  Device device() const { return device_; }
  const std::string& weights() const { return weights_; }
  // The shape every image must have after the validation transforms (the model's input).
  ImageShape input_shape() const { return input_shape_; }

 private:
  // Decodes and transforms `path` into `dst` (input_shape_ floats); throws naming the file.
  void load(const std::string& path, uint64_t key, float* dst, Pipeline::Workspace& ws, Image& img) const;

  json config_;
  DataConfig data_;
  std::shared_ptr<Module> model_;
  std::vector<std::string> classes_;
  std::string weights_;
  Device device_ = Device::cpu();
  DType compute_ = DType::f32;
  ImageShape input_shape_;
  int64_t batch_ = 64;
  int64_t workers_ = 1;
  DecodeOptions decode_;
  int64_t num_outputs_ = 0;  // the model's scores per image
};

// What collect_inputs() found.
struct CollectedInputs {
  struct Failed {
    std::string input;  // the argument
    std::string error;  // what was wrong, naming the input
  };
  std::vector<std::string> paths;  // the image files, in the order of the inputs
  std::vector<Failed> failed;      // inputs that name nothing usable
  // Per folder whose scan skipped files for their extension: "FOLDER: skipped N file(s) whose
  // extension is not an image's (.txt 2, (none) 1)" (extensions lower-cased, most frequent first).
  std::vector<std::string> skipped;
};

// The image files named by `inputs`: a file as it is, a folder's image files (recursively, by
// extension, sorted), a .txt list file's paths (data/image_folder.h, labels optional). An input
// that names nothing usable is in `failed` instead.
CollectedInputs collect_inputs(const std::vector<std::string>& inputs);

}  // namespace kiln
