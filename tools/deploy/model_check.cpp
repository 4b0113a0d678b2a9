// See model_check.h.
#include "tools/deploy/model_check.h"

#include <algorithm>
#include <string>
#include <cstdio>

#include "core/autograd.h"
#include "core/check.h"
#include "core/device.h"  // host_available_bytes
#include "layers/sequential.h"

namespace kiln {

namespace {
std::string bytes_str(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) b /= 1024, ++u;
  char s[32];
  std::snprintf(s, sizeof s, "%.1f %s", b, units[u]);
  return s;
}
}  // namespace

double loader_buffer_bytes(const DataConfig& data, ImageShape shape, int64_t batch) {
  // In doubles: 1e9 samples x 224x224x3 x 4 bytes x 5 buffers overflows int64_t.
  const double pixel = data.loader.dtype == "u8" ? 1 : data.loader.dtype == "bf16" ? 2 : 4;
  const double image = static_cast<double>(shape.numel()) * pixel + 8;  // + label
  // prefetch_depth(): "auto" (0 in a LoaderOptions made in code) is workers + 2.
  const double buffers = data.loader.workers > 0 ? static_cast<double>(data.loader.prefetch_depth()) + 1 : 1;
  const double val_batch = data.val_batch_size > 0 ? static_cast<double>(data.val_batch_size) : static_cast<double>(batch);
  return (static_cast<double>(batch) + val_batch) * image * buffers;
}

void check_loader_memory(const DataConfig& data, ImageShape shape, int64_t batch, double available_bytes) {
  if (!shape.known()) return;  // image sources end in a fixed size (DataConfig::from_json checks)
  const double need = loader_buffer_bytes(data, shape, batch);
  const double have = available_bytes >= 0 ? available_bytes : host_available_bytes();
  if (need <= have) return;
  // Name first the key furthest above its default (batch 64, prefetch 4), then the others.
  struct Key {
    std::string name;
    int64_t value;
    double ratio;
  };
  std::vector<Key> keys = {{"data.batch_size", batch, batch / 64.0},
                           {"data.prefetch", data.loader.prefetch_depth(), data.loader.prefetch_depth() / 4.0}};
  if (data.val_batch_size > 0) keys.push_back({"data.val_batch_size", data.val_batch_size, data.val_batch_size / 64.0});
  std::stable_sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) { return a.ratio > b.ratio; });
  std::string others;
  for (size_t i = 1; i < keys.size(); ++i) others += (i > 1 ? ", " : "") + keys[i].name + " = " + std::to_string(keys[i].value);
  KILN_FAIL(keys[0].name, " = ", keys[0].value, ": the data loaders' batch buffers would take ", bytes_str(need), " (",
            shape.str(), " ", data.loader.dtype, " images, ", data.loader.workers > 0 ? data.loader.prefetch_depth() + 1 : 1,
            " buffers per loader), more than the ", bytes_str(have), " of memory available; lower ", keys[0].name,
            " (with ", others, ")");
}

void check_model_fits_data(Module& model, const std::string& model_path, ImageShape shape, int64_t num_classes,
                           const std::string& data_source) {
  if (!shape.known()) return;
  const std::string images = "images of " + std::to_string(shape.h) + "x" + std::to_string(shape.w) + "x" +
                             std::to_string(shape.c) + " (HxWxC: data.source \"" + data_source +
                             "\" after data.train_transforms)";
  json mj;  // the model's config, to name its keys; a model built in code has none (layers/module.h)
  try {
    mj = model.to_json();
  } catch (const NoConfigError&) {
  }
  if (mj.contains("in_channels") && mj["in_channels"].is_number_integer())
    KILN_CHECK(mj["in_channels"].get<int64_t>() == shape.c, json_path(model_path, "in_channels"), " = ",
               mj["in_channels"].get<int64_t>(), " does not fit the data: ", images, "; set ",
               json_path(model_path, "in_channels"), " to ", shape.c);

  Device device = Device::cpu();
  for (auto& [n, p] : model.named_parameters()) {
    device = p.device();
    break;
  }
  const bool was_training = model.is_training();
  model.eval();  // running statistics untouched, no dropout draws
  NoGradGuard no_grad;
  Tensor out;
  try {
    Tensor x = Tensor::zeros({2, shape.h, shape.w, shape.c}, DType::f32, device);
    auto* seq = dynamic_cast<Sequential*>(&model);
    if (seq && mj.contains("layers")) {  // a layer list: find the layer that does not fit
      Tensor h = x;
      for (size_t i = 0; i < seq->size(); ++i) {
        try {
          h = (*seq)[i]->forward(h);
        } catch (const Error& e) {
          KILN_FAIL(json_path(json_path(model_path, "layers"), i), " (", (*seq)[i]->type(), ") does not fit its input ",
                    shape_str(h.shape()), " from ", images, ": ", e.what());
        }
      }
      out = h;
    } else {
      try {
        out = model.forward(x);
      } catch (const Error& e) {
        KILN_FAIL("the model ", json_path(model_path, "name"), " = \"", model.type(), "\" does not fit ", images, ": ",
                  e.what(), "; change the image size (data.train_transforms / data.val_transforms, e.g. a resize) or ",
                  json_path(model_path, "name"));
      }
    }
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  const std::string classes_key = mj.contains("layers") ? json_path(json_path(model_path, "layers"), mj["layers"].size() - 1)
                                                        : json_path(model_path, "num_classes");
  KILN_CHECK(out.dim() == 2 && out.size(0) == 2, "the model (", model_path, ") gives outputs of shape ",
             shape_str(out.shape()), " for 2 ", images, "; a classifier gives (batch, classes): end ",
             json_path(model_path, "layers"), " with a flatten and a linear layer");
  KILN_CHECK(out.size(1) >= num_classes, classes_key, " gives ", out.size(1), " scores per image, but the data has ",
             num_classes, " classes; set ", classes_key, mj.contains("layers") ? "'s out_features" : "", " to ",
             num_classes);
}

void check_before_run(Module& model, const DataConfig& data, ImageShape source_shape, int64_t batch,
                      int64_t num_classes) {
  const ImageShape shape = data.transforms(Split::train).output_shape(source_shape);
  check_loader_memory(data, shape, batch);
  check_model_fits_data(model, "model", shape, num_classes, data.source);
  // Progressive resizing starts with its smallest images (data/progressive.h): they must fit too.
  const int64_t first = shape.known() ? data.progressive_resize.size_at(0, shape.w) : shape.w;
  if (first == shape.w) return;
  try {
    check_model_fits_data(model, "model", {first, first, shape.c}, num_classes, data.source);
  } catch (const Error& e) {
    KILN_FAIL("data.progressive_resize: the first epoch's ", first, "x", first, " images do not fit the model: ",
              e.what(), "; raise data.progressive_resize.min_size or use a model that takes any size (a ResNet)");
  }
}


}  // namespace kiln
