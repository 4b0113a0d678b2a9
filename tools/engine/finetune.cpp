// train.init and train.freeze (see finetune.h).
#include "tools/engine/finetune.h"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "core/check.h"
#include "core/io/safetensors.h"
#include "core/json_util.h"
#include "layers/interop.h"
#include "tools/deploy/checkpoint.h"

namespace fs = std::filesystem;

namespace kiln {

void load_init_weights(Module& model, const std::string& init, const std::vector<std::string>& fresh, bool show) {
  const StateDict own = model.state_dict();
  for (size_t i = 0; i < fresh.size(); ++i) {
    const bool used = std::any_of(own.begin(), own.end(), [&](const auto& kv) { return name_under(kv.first, fresh[i]); });
    std::vector<std::string> tops;  // the top-level modules, which is what a prefix usually is
    for (auto& [name, child] : model.named_children()) tops.push_back(name);
    KILN_CHECK(used, "config: train.init_fresh[", i, "] = \"", fresh[i], "\" matches no tensor of ", model.type(),
               "; accepted: a module path or a tensor name (dotted, e.g. \"fc\", \"layer4.1\", \"fc.bias\"); the model's "
               "top-level modules are: ", tops.empty() ? "none" : join(tops));
  }
  std::string file = init;
  if (!fs::is_regular_file(file)) file = checkpoint_files(run_weights_checkpoint(init)).weights;  // a run: its best
  SafetensorsContents c = load_safetensors(file);
  InitReport r = import_pytorch_for_finetuning(model, c.tensors, file, fresh);
  if (!show) return;
  std::cout << "init: " << r.loaded.size() << " tensors loaded from " << file << "\n";
  if (!r.fresh.empty()) std::cout << "init: new (initialised as a fresh model): " << join(r.fresh) << "\n";
  if (!r.ignored.empty()) std::cout << "init: ignored (in the file, not in the model): " << join(r.ignored) << "\n";
}

std::vector<std::string> expand_backbone(Module& model, const std::vector<std::string>& prefixes) {
  std::vector<std::string> out = prefixes;
  const auto at = std::find(out.begin(), out.end(), kBackbone);
  if (at == out.end()) return out;
  const std::vector<std::string> head = head_parameter_names(model);
  KILN_CHECK(!head.empty(), "config: train.freeze[", at - out.begin(), "] = \"", kBackbone, "\" freezes everything but the "
             "classifier head, the model's last Linear module, and ", model.type(), " has none; name the parts to freeze "
             "instead (dotted prefixes, e.g. [\"layer1\", \"layer2\"])");
  std::vector<std::string> backbone;
  for (auto& [name, p] : model.named_parameters())
    if (std::find(head.begin(), head.end(), name) == head.end()) backbone.push_back(name);
  KILN_CHECK(!backbone.empty(), "config: train.freeze = [\"", kBackbone, "\"]: ", model.type(), " has no parameter "
             "outside its head (", join(head), ")");
  // In the entry's place and at the end, so that the other entries keep their index in freeze()'s errors.
  *at = backbone.front();
  out.insert(out.end(), backbone.begin() + 1, backbone.end());
  return out;
}

std::vector<ParamRef> trainable_params(Module& model, const std::vector<std::string>& freeze_prefixes, bool show) {
  std::vector<std::string> frozen = freeze(model, expand_backbone(model, freeze_prefixes), "config: train.freeze");
  std::vector<ParamRef> params;
  for (auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) params.push_back({name, p, false});
  KILN_CHECK(!params.empty() || model.named_parameters().empty(), "config: train.freeze = [", join(freeze_prefixes),
             "] freezes every parameter of ", model.type(), "; nothing would train: leave at least the head out");
  if (show && !frozen.empty()) {  // counts of scalar parameters, then of tensors
    int64_t trained = 0;
    for (const ParamRef& p : params) trained += p.param.numel();
    std::cout << "freeze: " << model.num_parameters() - trained << " parameters frozen (" << frozen.size()
              << " tensors under " << join(freeze_prefixes) << "), " << trained << " trained (" << params.size()
              << " tensors)\n";
  }
  return params;
}

}  // namespace kiln
