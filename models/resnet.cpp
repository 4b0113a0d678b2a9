#include "models/resnet.h"

#include <algorithm>

#include "core/ops/elementwise.h"
#include "layers/options.h"

namespace kiln::models {

namespace {
// Blocks per stage of the ImageNet ResNets.
std::vector<int64_t> imagenet_layers(int64_t depth) {
  switch (depth) {
    case 18: return {2, 2, 2, 2};
    case 34: return {3, 4, 6, 3};
    case 50: return {3, 4, 6, 3};
    case 101: return {3, 4, 23, 3};
    case 152: return {3, 8, 36, 3};
  }
  KILN_FAIL("resnet: depth ", depth, " is not accepted; accepted: 18, 34, 50, 101, 152");
}
}  // namespace

bool is_cifar_resnet(const std::string& name) {
  static const std::vector<std::string> cifar_names = {"resnet20", "resnet32", "resnet44", "resnet56", "resnet110",
                                                       "resnet_cifar"};
  return std::find(cifar_names.begin(), cifar_names.end(), name) != cifar_names.end();
}

ResNetOptions ResNetOptions::from_json(const json& j, const std::string& path, const std::string& name) {
  JsonReader r(j, path);
  r.allow("name");
  ResNetOptions o;
  o.name = name;
  int64_t d = name == "resnet_cifar" ? 20 : std::stoll(name.substr(6));
  o.cifar = is_cifar_resnet(name);
  if (o.cifar) {
    o.common = CommonOptions{3, 10, "none"};
    o.width = 16;
    o.shortcut = "A";
    if (name == "resnet_cifar") d = r.get("depth", d, int64_t{8}, int64_t{1202});
    KILN_CHECK((d - 2) % 6 == 0, "config: ", r.path_of("depth"), " = ", d, " is not accepted; accepted: 6n+2 (8, 14, 20, 32, 44, 56, 110, ...)");
    o.width = r.get("width", o.width, int64_t{1}, int64_t{4096});
    o.shortcut = r.get_choice("shortcut", o.shortcut, {"A", "B"});
  }
  else
    o.stem = r.get_choice("stem", o.stem, {"imagenet", "cifar"});
  o.depth = d;
  o.common.read(r);
  o.zero_init_residual = r.get("zero_init_residual", o.zero_init_residual);
  o.se_reduction = r.get("se_reduction", o.se_reduction, int64_t{0}, int64_t{4096});
  if (!o.cifar) o.fused_bn_conv = r.get("fused_bn_conv", o.fused_bn_conv);  // CIFAR layouts: an unknown key
  r.finish();
  return o;
}

json ResNetOptions::to_json() const {
  json j = {{"name", name}, {"zero_init_residual", zero_init_residual}};
  if (!cifar) j["fused_bn_conv"] = fused_bn_conv;
  if (se_reduction > 0) j["se_reduction"] = se_reduction;  // absent: the JSON of models from before the key
  if (cifar) {
    if (name == "resnet_cifar") j["depth"] = depth;
    j["width"] = width;
    j["shortcut"] = shortcut;
  } else {
    j["stem"] = stem;
  }
  common.write(j);
  return j;
}

ResNet::ResNet(const ResNetOptions& o) : Module(o.name), opts_(o), policy_(o.common.policy()) {
  std::vector<int64_t> layers, widths;
  bool bottleneck = false;
  int64_t stem;
  if (o.cifar) {
    KILN_CHECK(o.depth >= 8 && (o.depth - 2) % 6 == 0, o.name, ": depth ", o.depth, " must be 6n+2 with n >= 1");
    KILN_CHECK(o.width > 0, o.name, ": width ", o.width, " must be positive");
    int64_t n = (o.depth - 2) / 6;
    layers = {n, n, n};
    widths = {o.width, 2 * o.width, 4 * o.width};
    stem = o.width;
    conv1_ = register_module("conv1", conv(o.common.in_channels, stem, 3, 1, 1, false, "kaiming_normal"));
  } else {
    layers = imagenet_layers(o.depth);
    widths = {64, 128, 256, 512};
    bottleneck = o.depth >= 50;
    stem = 64;
    KILN_CHECK(o.stem == "imagenet" || o.stem == "cifar", o.name, ": stem \"", o.stem,
               "\" is not accepted; accepted: \"imagenet\", \"cifar\"");
    if (o.stem == "cifar")
      conv1_ = register_module("conv1", conv(o.common.in_channels, stem, 3, 1, 1, false, "kaiming_normal"));
    else
      conv1_ = register_module("conv1", conv(o.common.in_channels, stem, 7, 2, 3, false, "kaiming_normal"));
  }
  bn1_ = register_module("bn1", batch_norm(stem));
  register_module("relu", relu());
  if (!o.cifar && o.stem == "imagenet") maxpool_ = register_module("maxpool", max_pool(3, 2, 1));
  int64_t in = stem;
  for (size_t s = 0; s < layers.size(); ++s) {
    auto stage = register_module("layer" + std::to_string(s + 1), std::make_shared<Sequential>());
    for (int64_t b = 0; b < layers[s]; ++b) {
      BlockOptions bo;
      bo.in_channels = in;
      bo.planes = widths[s];
      bo.stride = (s > 0 && b == 0) ? 2 : 1;
      bo.shortcut = o.cifar ? o.shortcut : "B";
      bo.zero_init_residual = o.zero_init_residual;
      bo.fused_bn_conv = o.fused_bn_conv;
      bo.se_reduction = o.se_reduction;
      bo.input_after_relu = true;  // the stem's and every block's output end in a ReLU (max-pooled or not)
      std::shared_ptr<ResidualBlock> block;
      if (bottleneck) block = std::make_shared<Bottleneck>(bo);
      else block = std::make_shared<BasicBlock>(bo);
      in = block->out_channels();
      stage->push_back(block);
      units_.push_back({block});
    }
    stages_.push_back(stage);
  }
  avgpool_ = register_module("avgpool", std::make_shared<GlobalAvgPool>());
  fc_ = register_module("fc", linear(in, o.common.num_classes));
}

std::vector<std::shared_ptr<ResidualBlock>> ResNet::blocks() const {
  std::vector<std::shared_ptr<ResidualBlock>> out;
  for (auto& u : units_) out.push_back(std::static_pointer_cast<ResidualBlock>(u[0]));
  return out;
}

Tensor ResNet::forward(const Tensor& x) {
  check_image_input(type(), x, opts_.common.in_channels);
  Tensor h = ops::relu(bn1_->forward(conv1_->forward(x)));
  if (maxpool_) h = maxpool_->forward(h);
  h = run_units(units_, h, policy_);
  return fc_->forward(avgpool_->forward(h));
}

}  // namespace kiln::models
