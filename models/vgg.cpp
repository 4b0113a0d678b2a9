#include "models/vgg.h"

#include <vector>

namespace kiln::models {

namespace {
// Conv widths per stage; a maxpool ends each stage.
std::vector<std::vector<int64_t>> stages(int64_t depth) {
  switch (depth) {
    case 11: return {{64}, {128}, {256, 256}, {512, 512}, {512, 512}};
    case 13: return {{64, 64}, {128, 128}, {256, 256}, {512, 512}, {512, 512}};
    case 16: return {{64, 64}, {128, 128}, {256, 256, 256}, {512, 512, 512}, {512, 512, 512}};
    case 19: return {{64, 64}, {128, 128}, {256, 256, 256, 256}, {512, 512, 512, 512}, {512, 512, 512, 512}};
  }
  KILN_FAIL("vgg: depth ", depth, " is not accepted; accepted: 11, 13, 16, 19");
}
}  // namespace

VGGOptions VGGOptions::from_json(const json& j, const std::string& path, const std::string& name) {
  JsonReader r(j, path);
  r.allow("name");
  VGGOptions o;
  o.batch_norm = name.size() > 3 && name.substr(name.size() - 3) == "_bn";
  o.depth = std::stoll(name.substr(3, name.size() - 3 - (o.batch_norm ? 3 : 0)));
  o.common.read(r);
  o.dropout = r.get("dropout", o.dropout, 0.0, 0.99);
  r.finish();
  return o;
}

std::string VGGOptions::name() const { return "vgg" + std::to_string(depth) + (batch_norm ? "_bn" : ""); }

json VGGOptions::to_json() const {
  json j = {{"name", name()}, {"dropout", dropout}};
  common.write(j);
  return j;
}

VGG::VGG(const VGGOptions& o) : FeatureClassifier(o.name(), o.common), opts_(o) {
  features_ = register_module("features", std::make_shared<Sequential>());
  int64_t in = o.common.in_channels;
  for (const auto& stage : stages(o.depth)) {
    for (int64_t width : stage) {
      features_->push_back(conv(in, width, 3, 1, 1, true, "kaiming_normal"));
      if (o.batch_norm) features_->push_back(batch_norm(width));
      features_->push_back(relu());
      in = width;
    }
    features_->push_back(max_pool(2, 2));
  }
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(AdaptiveAvgPool2dOptions{7}));
  classifier_ = register_module("classifier", std::make_shared<Sequential>());
  Sequential& c = *classifier_;
  c.push_back(linear(512 * 7 * 7, 4096, "normal"));
  c.push_back(relu());
  c.push_back(dropout(o.dropout));
  c.push_back(linear(4096, 4096, "normal"));
  c.push_back(relu());
  c.push_back(dropout(o.dropout));
  c.push_back(linear(4096, o.common.num_classes, "normal"));
  finish_build(512, 7, 7);
}

}  // namespace kiln::models
