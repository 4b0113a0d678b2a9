// See checkpoint_legacy.h.
#include "tools/engine/checkpoint_legacy.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include "core/autograd.h"
#include "layers/blocks.h"
#include "layers/conv.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/sequential.h"
#include "models/common.h"

namespace kiln {

namespace {

// What a run of layers gives, as the channel count of an NHWC activation, or one of:
constexpr int64_t kPassesInput = 0;  // the layers keep their input's channels (or there are none)
constexpr int64_t kNot4d = -1;       // a 2-D (N, features) output: a Flatten has nothing to permute
constexpr int64_t kUnknown = -2;     // a layer whose output channels are not known here

int64_t channels_of(Module& m);

// The channels `layers[0..end)` give, walking back from the last one.
int64_t channels_after(const std::vector<std::shared_ptr<Module>>& layers, size_t end) {
  for (size_t i = end; i-- > 0;) {
    const int64_t c = channels_of(*layers[i]);
    if (c != kPassesInput) return c;
  }
  return kPassesInput;
}

int64_t channels_of(Module& m) {
  if (auto* c = dynamic_cast<Conv2d*>(&m)) return c->options().out_channels;
  if (auto* b = dynamic_cast<BatchNorm2d*>(&m)) return b->options().num_features;
  if (auto* r = dynamic_cast<ResidualBlock*>(&m)) return r->out_channels();
  if (auto* s = dynamic_cast<Sequential*>(&m)) return channels_after(s->layers(), s->size());
  static const char* two_d[] = {"linear", "flatten", "global_avg_pool"};
  if (std::find(std::begin(two_d), std::end(two_d), m.type()) != std::end(two_d)) return kNot4d;
  static const char* keep[] = {"relu", "silu", "dropout", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                               "local_response_norm"};
  if (std::find(std::begin(keep), std::end(keep), m.type()) != std::end(keep)) return kPassesInput;
  return kUnknown;
}

std::string join_path(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

struct FlattenedLinear {
  std::string linear;  // module path
  int64_t channels;    // C of the flattened (N, H, W, C), or kUnknown
  int64_t in_features;
};

// The Linears a Flatten fed as the earlier kiln linked them (layers/sequential.cpp and
// models/common.cpp of that time), with the channels of the flattened activation.
std::vector<FlattenedLinear> flattened_linears(Module& model, int64_t image_channels, const std::string& file) {
  std::vector<FlattenedLinear> out;
  auto resolve = [&](int64_t c, bool sees_model_input) {
    if (c == kPassesInput) return sees_model_input && image_channels > 0 ? image_channels : kUnknown;
    return c;
  };
  for (auto& [path, mod] : model.named_modules()) {
    if (auto* fc = dynamic_cast<models::FeatureClassifier*>(mod)) {
      const auto& cl = fc->classifier().layers();
      for (size_t i = 0; i < cl.size(); ++i)
        if (auto* lin = dynamic_cast<Linear*>(cl[i].get())) {
          const auto& f = fc->features().layers();
          out.push_back({join_path(path, "classifier." + std::to_string(i)),
                         resolve(channels_after(f, f.size()), mod == &model), lin->options().in_features});
          break;
        }
      continue;
    }
    auto* seq = dynamic_cast<Sequential*>(mod);
    if (!seq) continue;
    const auto& layers = seq->layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      if (!dynamic_cast<Flatten*>(layers[i].get())) continue;
      const int64_t c = resolve(channels_after(layers, i), mod == &model);
      if (c == kNot4d || c == 1) continue;  // nothing was permuted
      size_t j = i + 1;
      while (j < layers.size() && (layers[j]->type() == "relu" || layers[j]->type() == "dropout")) ++j;
      if (j == layers.size()) continue;
      auto* lin = dynamic_cast<Linear*>(layers[j].get());
      KILN_CHECK(lin, "checkpoint '", file, "' was written by an earlier kiln, whose flatten '", join_path(path, std::to_string(i)),
                 "' gave its features in (h, w, c) order to layer '", join_path(path, std::to_string(j)), "' (",
                 layers[j]->type(), "), which it did not convert to PyTorch's (c, h, w) order: this kiln's flatten gives "
                 "(c, h, w), and the weights and training state of that checkpoint cannot be converted. Resume it with "
                 "the kiln that wrote it, or start a new run");
      out.push_back({join_path(path, std::to_string(j)), c, lin->options().in_features});
    }
  }
  return out;
}

bool starts_with(const std::string& s, const std::string& start) { return s.rfind(start, 0) == 0; }

}  // namespace

void convert_legacy_optimizer_state(Module& model, std::map<std::string, Tensor>& tensors, int64_t image_channels,
                                    const std::string& file) {
  NoGradGuard ng;
  for (const FlattenedLinear& f : flattened_linears(model, image_channels, file)) {
    const std::string prefix = f.linear + ".weight.";
    std::vector<std::string> keys;
    for (auto& [key, t] : tensors)
      if (starts_with(key, prefix) && key.find('.', prefix.size()) == std::string::npos) keys.push_back(key);
    if (keys.empty()) continue;  // no state for it (frozen, or not stepped yet)
    KILN_CHECK(f.channels > 0, "checkpoint '", file, "' was written by an earlier kiln, which kept the optimizer state "
               "of linear '", f.linear, "' in the (h, w, c) column order of the flatten before it; the channels of that "
               "flatten's input cannot be found from the model, so the state cannot be converted to this kiln's (c, h, w) "
               "order. Resume it with the kiln that wrote it, or start a new run from its weights (train.init=",
               "<the checkpoint's .safetensors>: weights load unchanged)");
    KILN_CHECK(f.in_features % f.channels == 0, "checkpoint '", file, "': linear '", f.linear, "' has ", f.in_features,
               " inputs but follows a flatten of ", f.channels, " channels; the optimizer state cannot be converted");
    const int64_t hw = f.in_features / f.channels;
    if (hw == 1) continue;  // one position: the same order
    for (const std::string& key : keys) {
      Tensor& t = tensors.at(key);
      if (t.dim() != 2 || t.size(1) != f.in_features) continue;  // the optimizer's load names the misfit
      const int64_t rows = t.size(0);
      // Column s * C + c (s = h * W + w) moves to c * HW + s.
      t = t.reshape({rows, hw, f.channels}).permute({0, 2, 1}).contiguous().reshape({rows, f.in_features});
    }
  }
}

}  // namespace kiln
