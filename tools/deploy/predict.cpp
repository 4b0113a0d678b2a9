// Prediction on image files (see predict.h).
#include "tools/deploy/predict.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "core/autograd.h"
#include "core/check.h"
#include "core/ops/loss.h"
#include "core/ops/reduce.h"
#include "data/image_folder.h"
#include "data/transform.h"
#include "models/registry.h"
#include "tools/deploy/checkpoint.h"
#include "tools/deploy/config.h"
#include "tools/deploy/model_io.h"
#include "tools/deploy/precision.h"

namespace fs = std::filesystem;

namespace kiln {

void save_class_names(const std::string& path, const std::vector<std::string>& names) {
  std::ofstream out(path);
  KILN_CHECK(out, "cannot write ", path);
  out << json(names).dump(1) << "\n";
  KILN_CHECK(out.good(), "cannot write ", path);
}

std::vector<std::string> load_class_names(const std::string& path) {
  std::ifstream in(path);
  KILN_CHECK(in, "cannot read the class names ", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    KILN_FAIL(path, ": not valid JSON (", e.what(), "); expected a list of class names, [\"cat\", \"dog\"]");
  }
  KILN_CHECK(j.is_array() && !j.empty(), path, ": expected a non-empty list of class names, [\"cat\", \"dog\"], got ",
             j.dump().substr(0, 80));
  std::vector<std::string> names;
  for (size_t i = 0; i < j.size(); ++i) {
    KILN_CHECK(j[i].is_string(), path, ": entry [", i, "] is ", j[i].dump().substr(0, 40), ", not a class name (a string)");
    names.push_back(j[i].get<std::string>());
  }
  return names;
}

namespace {

// data.batch_size of -1 or a fraction asks AutoBatch, a training choice: predict uses 64 then.
void fix_auto_batch(json& data) {
  if (!data.is_object() || !data.contains("batch_size")) return;
  const json& b = data["batch_size"];
  if (!b.is_number_integer() || b.get<int64_t>() < 1) data["batch_size"] = 64;
}

}  // namespace

Predictor::Predictor(const std::string& arg, const PredictOptions& o) {
  const RunOrConfig src = resolve_run_or_config("kiln predict", arg);
  const bool run = src.is_run();
  const std::string& config_file = src.config_file;
  config_ = load_config_file(config_file);
  apply_overrides(config_, o.overrides);
  weights_ = !o.weights.empty() ? o.weights : run ? arg : "";
  KILN_CHECK(!weights_.empty(), "kiln predict ", arg,
             ": a config file needs weights=FILE (a .safetensors file, a checkpoint or a run folder)");
  KILN_CHECK(config_.is_object() && config_.contains("data") && config_.contains("model"), config_file,
             ": a config needs a \"model\" and a \"data\" section");
  fix_auto_batch(config_["data"]);
  data_ = DataConfig::from_json(config_["data"], "data");
  const RunDevice run_device = run_device_from_json(config_.value("train", json::object()), "train");
  device_ = parse_device_list(run_device.device)[0];
  compute_ = compute_dtype_of(run_device.precision, device_);

  input_shape_ = data_.val_transforms.output_shape(data_.source_image_shape());
  KILN_CHECK(input_shape_.known(), "data.val_transforms: the images must end in a fixed size to be batched");
  KILN_CHECK(input_shape_.c == 1 || input_shape_.c == 3, "data: the model takes ", input_shape_.c,
             "-channel images; image files decode to 1 (grey) or 3 (RGB) channels");
  decode_.channels = input_shape_.c;
  decode_.max_pixels = data_.image_options().max_image_pixels;
  decode_.min_side = data_.val_transforms.min_source_side();
  decode_.transforms = std::make_shared<const Pipeline>(data_.val_transforms);  // sizes checked at the header
  batch_ = o.batch > 0 ? o.batch : std::min<int64_t>(256, data_.loader_options(Split::val).batch_size);
  workers_ = std::max<int64_t>(1, data_.loader.workers);

  model_ = load_model(config_, weights_);
  model_->to(device_);
  {
    NoGradGuard ng;
    Tensor x = Tensor::zeros({1, input_shape_.h, input_shape_.w, input_shape_.c}, DType::f32).to(device_).to(compute_);
    num_outputs_ = model_->forward(x).size(1);
  }

  std::error_code ec;
  const std::string classes_file = run ? (fs::path(arg) / "classes.json").string() : "";
  if (run && fs::exists(classes_file, ec)) {
    classes_ = load_class_names(classes_file);
    KILN_CHECK(static_cast<int64_t>(classes_.size()) == num_outputs_, classes_file, " names ", classes_.size(),
               " classes but the model gives ", num_outputs_, " scores per image");
    return;
  }
  try {  // a config (or a run from before classes.json): the data source's names, if it opens
    classes_ = make_dataset(data_, Split::train)->class_names();
  } catch (const Error&) {
    classes_.clear();
  }
  if (static_cast<int64_t>(classes_.size()) != num_outputs_) classes_ = numbered_class_names(num_outputs_);
}

void Predictor::load(const std::string& path, uint64_t key, float* dst, Pipeline::Workspace& ws, Image& img) const {
  load_image(path, decode_, img);
  const Pipeline& p = data_.val_transforms;
  ImageShape s;
  try {
    s = p.output_shape(img.shape());
  } catch (const Error& e) {
    KILN_FAIL(path, ": a ", img.shape().str(), " image does not fit data.val_transforms: ", e.what());
  }
  KILN_CHECK(s == input_shape_, path, ": a ", img.shape().str(), " image gives ", s.str(),
             " after data.val_transforms, but the model takes ", input_shape_.str(),
             "; resize the image, or give the config transforms that end in that size (resize, center_crop)");
  p.augment(img, key, ws);
  p.write(img, dst, DType::f32);
}

std::vector<Prediction> Predictor::predict(const std::vector<std::string>& paths, int64_t topk) const {
  KILN_CHECK(topk >= 1, "topk=", topk, ": must be at least 1");
  const int64_t k = std::min<int64_t>(topk, num_outputs_);
  const int64_t numel = input_shape_.numel();
  std::vector<Prediction> out(paths.size());
  NoGradGuard ng;
  for (size_t b0 = 0; b0 < paths.size(); b0 += static_cast<size_t>(batch_)) {
    const size_t n = std::min(paths.size() - b0, static_cast<size_t>(batch_));
    Tensor x = Tensor::empty({static_cast<int64_t>(n), input_shape_.h, input_shape_.w, input_shape_.c}, DType::f32);
    float* xs = x.data<float>();
    // Decode and transform on workers_ threads, sample i on thread i % workers_.
    auto work = [&](size_t t, size_t step) {
      Pipeline::Workspace ws;
      Image img;
      for (size_t i = t; i < n; i += step) {
        Prediction& p = out[b0 + i];
        p.path = paths[b0 + i];
        const uint64_t key = SampleRng::sample_key(data_.loader.seed, 0, b0 + i);
        try {
          load(p.path, key, xs + static_cast<int64_t>(i) * numel, ws, img);
        } catch (const std::exception& e) {
          p.error = e.what();
          if (p.error.rfind(p.path + ": ", 0) != 0) p.error = p.path + ": " + p.error;  // the file first
        }
      }
    };
    const size_t threads = std::min<size_t>(static_cast<size_t>(workers_), n);
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t, threads);
    work(0, threads);
    for (auto& t : pool) t.join();
    // The images that loaded, packed to the front.
    std::vector<size_t> good;
    for (size_t i = 0; i < n; ++i) {
      if (!out[b0 + i].ok()) continue;
      if (good.size() != i) std::copy_n(xs + i * numel, numel, xs + good.size() * numel);
      good.push_back(i);
    }
    if (good.empty()) continue;
    if (good.size() < n) x = x.slice(0, 0, static_cast<int64_t>(good.size())).contiguous();
    Tensor logits = model_->forward(x.to(device_).to(compute_)).to(Device::cpu()).to(DType::f32);
    std::vector<int64_t> idx = ops::topk_indices(logits, k).to_int_vector();
    std::vector<double> prob = ops::softmax(logits).to_double_vector();
    for (size_t g = 0; g < good.size(); ++g) {
      Prediction& p = out[b0 + good[g]];
      for (int64_t j = 0; j < k; ++j) {
        const int64_t c = idx[g * k + j];
        p.index.push_back(c);
        p.prob.push_back(prob[g * num_outputs_ + c]);
      }
    }
  }
  return out;
}

namespace {

// "N file(s) whose extension is not an image's (.txt 2, .json 1)": the skipped extensions by count.
std::string skipped_text(const std::map<std::string, int64_t>& by_ext) {
  std::vector<std::pair<int64_t, std::string>> v;
  int64_t n = 0;
  for (const auto& [ext, count] : by_ext) v.push_back({-count, ext}), n += count;
  std::sort(v.begin(), v.end());
  std::string s = "skipped " + std::to_string(n) + " file(s) whose extension is not an image's (";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i].second + " " + std::to_string(-v[i].first);
  return s + "; accepted: .jpg .jpeg .png .bmp .webp, any case)";
}

}  // namespace

CollectedInputs collect_inputs(const std::vector<std::string>& inputs) {
  static const char* kAccepted = "an image file (.jpg .jpeg .png .bmp .webp), a folder of them or a .txt image list";
  CollectedInputs r;
  auto fail = [&](const std::string& in, const std::string& error) { r.failed.push_back({in, error}); };
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      std::map<std::string, int64_t> skipped;  // extension (lower case, "(none)") -> files
      for (auto it = fs::recursive_directory_iterator(in, fs::directory_options::follow_directory_symlink, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_directory()) continue;
        const fs::path& f = it->path();
        if (is_image_file_name(f.filename().string())) {
          found.push_back(f.string());
          continue;
        }
        std::string ext = f.extension().string();
        for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        ++skipped[ext.empty() ? "(none)" : ext];
      }
      if (ec) fail(in, in + ": cannot list the folder: " + ec.message());
      else if (found.empty()) fail(in, in + ": the folder holds no image files (.jpg .jpeg .png .bmp .webp, any case)");
      if (!skipped.empty()) r.skipped.push_back(in + ": " + skipped_text(skipped));
      std::sort(found.begin(), found.end());
      r.paths.insert(r.paths.end(), found.begin(), found.end());
    } else if (in.size() > 4 && in.compare(in.size() - 4, 4, ".txt") == 0) {
      try {
        ImageList list = read_image_list(in, /*labels=*/false);
        if (list.entries.empty()) fail(in, in + ": the list file names no images");
        for (const ImageFileEntry& e : list.entries) r.paths.push_back(e.path);
      } catch (const Error& e) {
        fail(in, e.what());
      }
    } else if (is_image_file_name(in)) {
      r.paths.push_back(in);  // a missing file is reported when it is loaded
    } else {
      fail(in, in + ": not " + kAccepted);
    }
  }
  return r;
}

}  // namespace kiln
