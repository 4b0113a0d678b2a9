// `kiln export RUN_OR_CONFIG [weights=FILE | init=random] format=onnx out=model.onnx
//  [reference=REF.safetensors [images=DIR|FILE,...]] [key=value ...]`: the model as ONNX
// (tools/onnx/onnx_export.h), with the validation preprocessing in its metadata, and optionally a
// reference batch with kiln's logits for comparing runtimes (tools/bench/onnx_compare.py).
// docs/export.md. Tests: tests/onnx/onnx_export_test.cpp.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/autograd.h"
#include "core/io/safetensors.h"
#include "core/rng.h"
#include "data/config.h"
#include "data/image_decode.h"
#include "layers/init.h"
#include "models/registry.h"
#include "tools/deploy/checkpoint.h"
#include "tools/cli/commands.h"
#include "tools/deploy/config.h"
#include "tools/cli/kv_args.h"
#include "tools/engine/metrics.h"
#include "tools/deploy/model_io.h"
#include "tools/onnx/onnx_export.h"

namespace kiln::cli {

namespace {
namespace fs = std::filesystem;

const char* kUsage =
    "usage: kiln export RUN_OR_CONFIG [weights=FILE | init=random] [format=onnx] out=model.onnx\n"
    "                   [reference=REF.safetensors [images=DIR|FILE,...]] [key=value ...]\n"
    "  RUN_OR_CONFIG   a run folder (its config.json; weights: its best checkpoint, else its last) or a config file\n"
    "  weights=FILE    a .safetensors file or a checkpoint (as kiln eval takes)\n"
    "  init=random     no weights: the model as initialised with the config's train.seed\n"
    "  format=onnx     the only format (default onnx): opset 13, input \"input\" (batch, C, H, W) float32\n"
    "                  normalised as the validation transforms do, output \"logits\" (batch, classes)\n"
    "  out=FILE        the model file to write (atomically)\n"
    "  reference=FILE  also write the model's input batch (\"input\", NCHW) and kiln's fp32 CPU logits\n"
    "                  (\"logits\") as safetensors: images= through the validation transforms, else a\n"
    "                  fixed seeded random batch of 4\n"
    "  key=value       config overrides, as for kiln train (e.g. data.val_transforms.0.size=160)\n";

struct ExportArgs {
  std::string source, weights, init, format = "onnx", out, reference;
  std::vector<std::string> images, overrides;
};

ExportArgs parse(const Args& args) {
  KILN_CHECK(!args.empty() && args[0].find('=') == std::string::npos,
             "kiln export: the first argument must be a run folder or a config file\n", kUsage);
  ExportArgs a;
  a.source = args[0];
  const KeyValueArgs kv("kiln export", Args(args.begin() + 1, args.end()),
                        {{"weights", ""}, {"init", ""}, {"format", a.format}, {"out", ""}, {"reference", ""}, {"images", ""}},
                        KeyValueArgs::Mode::overrides);
  a.weights = kv.str("weights");
  a.init = kv.str("init");
  a.format = kv.str("format");
  a.out = kv.str("out");
  a.reference = kv.str("reference");
  for (auto& p : split_commas(kv.str("images"))) a.images.push_back(p);
  a.overrides = kv.overrides();
  KILN_CHECK(a.format == "onnx", "kiln export: format=", a.format, " is not accepted; accepted: onnx");
  KILN_CHECK(!a.out.empty(), "kiln export: out=FILE is required (the .onnx file to write)");
  KILN_CHECK(a.init.empty() || a.init == "random", "kiln export: init=", a.init, " is not accepted; accepted: random");
  KILN_CHECK(a.init.empty() || a.weights.empty(), "kiln export: give weights=FILE or init=random, not both");
  KILN_CHECK(a.images.empty() || !a.reference.empty(), "kiln export: images= needs reference=FILE (the images "
             "make the reference batch)");
  return a;
}

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".webp";
}

// Every image file given: files as they are, folders' .png/.jpg/.jpeg/.webp files in name order.
std::vector<std::string> list_images(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  for (auto& g : given) {
    if (fs::is_directory(g)) {
      std::vector<std::string> files;
      for (auto& e : fs::directory_iterator(g))
        if (e.is_regular_file() && is_image_file(e.path())) files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      KILN_CHECK(!files.empty(), "kiln export: images=", g, " holds no .png, .jpg, .jpeg or .webp file");
      out.insert(out.end(), files.begin(), files.end());
    } else {
      out.push_back(g);
    }
  }
  return out;
}

// The class names of a run folder's classes.json (a list of names, or {"classes": [...]}); empty when absent.
std::vector<std::string> read_class_names(const std::string& run_dir) {
  std::string path = run_dir + "/classes.json";
  if (run_dir.empty() || !fs::exists(path)) return {};
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot read '", path, "'");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  json j = parse_config_text(text, "class names file '" + path + "'");
  if (j.is_object() && j.contains("classes")) j = j["classes"];
  KILN_CHECK(j.is_array(), "'", path, "' must hold a list of class names or {\"classes\": [...]}");
  std::vector<std::string> names;
  for (auto& v : j) {
    KILN_CHECK(v.is_string(), "'", path, "': every class name must be a string, not ", v.dump());
    names.push_back(v.get<std::string>());
  }
  return names;
}

std::string channel_order(int64_t c) {
  if (c == 3) return "RGB";
  if (c == 1) return "grey";
  return std::to_string(c) + " channels";
}

// (N, H, W, C) batch of the images through the validation transforms.
Tensor image_batch(const std::vector<std::string>& files, const DataConfig& d, ImageShape want) {
  Tensor batch = Tensor::zeros({static_cast<int64_t>(files.size()), want.h, want.w, want.c});
  Pipeline::Workspace ws;
  DecodeOptions dopt;
  dopt.channels = want.c;
  dopt.max_pixels = d.image_options().max_image_pixels;
  for (size_t i = 0; i < files.size(); ++i) {
    Image img;
    load_image(files[i], dopt, img);
    d.val_transforms.augment(img, 0, ws);
    KILN_CHECK(img.shape() == want, "kiln export: image '", files[i], "' is ", img.shape().str(),
               " after the validation transforms but the model takes ", want.str(),
               "; accepted: images the transforms bring to that size (resize/center_crop in data.val_transforms)");
    d.val_transforms.write(img, batch.data<float>() + i * want.numel(), DType::f32);
  }
  return batch;
}
}  // namespace

int cmd_export(const Args& args) {
  if (wants_help(args, kUsage)) return 0;
  ExportArgs a = parse(args);
  const RunOrConfig src = resolve_run_or_config("kiln export", a.source);
  const std::string run_dir = src.run_dir;
  const std::string& config_path = src.config_file;
  if (src.is_run() && a.weights.empty() && a.init.empty()) a.weights = a.source;
  KILN_CHECK(!a.weights.empty() || !a.init.empty(), "kiln export ", a.source, " needs weights=FILE (a .safetensors "
             "file or a run folder) or init=random");
  json config = load_config_file(config_path);
  apply_overrides(config, a.overrides);
  KILN_CHECK(config.is_object() && config.contains("model") && config.contains("data"), "kiln export: '", config_path,
             "' needs a \"model\" and a \"data\" section");
  std::shared_ptr<Module> model = a.weights.empty() ? initial_model(config) : load_model(config, a.weights);

  DataConfig d = DataConfig::from_json(config["data"], "data");
  ImageShape in = d.val_transforms.output_shape(d.source_image_shape());
  KILN_CHECK(in.known(), "kiln export: data.val_transforms give images of ", in.str(), "; the model needs a fixed "
             "size: end data.val_transforms in a resize/center_crop to one");
  int64_t num_outputs = 0;
  {  // one forward: the number of outputs (classes.json must name as many)
    NoGradGuard ng;
    Tensor y = (*model)(Tensor::zeros({1, in.h, in.w, in.c}));
    num_outputs = y.dim() == 2 ? y.size(1) : 0;
  }

  OnnxExportOptions o;
  o.channels = in.c;
  o.height = in.h;
  o.width = in.w;
  o.graph_name = model->type();
  const NormalizeOptions& norm = d.val_transforms.normalize().options();
  o.metadata["kiln.model"] = model->type();
  o.metadata["kiln.model_config"] = model->to_json().dump();
  o.metadata["kiln.input_layout"] = "NCHW float32 (batch, " + std::to_string(in.c) + ", " + std::to_string(in.h) +
                                    ", " + std::to_string(in.w) + ")";
  o.metadata["kiln.channel_order"] = channel_order(in.c);
  o.metadata["kiln.pixel_scale"] = "x = (pixel / 255 - mean[c]) / std[c], pixels 0..255";
  o.metadata["kiln.mean"] = json(norm.mean).dump();
  o.metadata["kiln.std"] = json(norm.std).dump();
  o.metadata["kiln.val_transforms"] = d.val_transforms.to_json().dump();
  o.metadata["kiln.output"] = "logits (batch, classes); softmax gives probabilities";
  std::vector<std::string> classes = read_class_names(run_dir);
  KILN_CHECK(classes.empty() || static_cast<int64_t>(classes.size()) == num_outputs, "kiln export: '", run_dir,
             "/classes.json' names ", classes.size(), " classes but the model has ", num_outputs, " outputs");
  if (!classes.empty()) o.metadata["kiln.classes"] = json(classes).dump();
  if (!a.weights.empty()) o.metadata["kiln.weights"] = a.weights;
  else o.metadata["kiln.weights"] = "init=random, seed " + config.value("train", json::object()).value("seed", json(0)).dump();

  // The reference batch first: an unreadable image then stops the command before any file is written.
  Tensor x;
  if (!a.reference.empty() && a.images.empty()) {
    Generator gen;
    gen.manual_seed(1234);
    x = rand_normal({4, in.h, in.w, in.c}, 0.0, 1.0, DType::f32, Device::cpu(), &gen);
  } else if (!a.reference.empty()) {
    x = image_batch(list_images(a.images), d, in);
  }

  std::string bytes = export_onnx(*model, o);
  write_file_atomically(a.out, bytes);
  std::printf("wrote %s: %s, input (batch, %lld, %lld, %lld), opset %lld, %.1f MiB%s\n", a.out.c_str(),
              model->type().c_str(), static_cast<long long>(in.c), static_cast<long long>(in.h),
              static_cast<long long>(in.w), static_cast<long long>(kOnnxOpset), bytes.size() / 1048576.0,
              classes.empty() ? "" : (", " + std::to_string(classes.size()) + " class names").c_str());

  if (!a.reference.empty()) {
    NoGradGuard ng;
    Tensor logits = (*model)(x).to(DType::f32).contiguous();
    save_safetensors(a.reference, {{"input", x.permute({0, 3, 1, 2}).contiguous()}, {"logits", logits}},
                     {{"model", model->type()}});
    std::printf("wrote %s: input %s, logits %s\n", a.reference.c_str(), x.permute({0, 3, 1, 2}).str().c_str(),
                logits.str().c_str());
  }
  return 0;
}

}  // namespace kiln::cli
