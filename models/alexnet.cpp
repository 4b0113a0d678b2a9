#include "models/alexnet.h"

namespace kiln::models {

AlexNetOptions AlexNetOptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  AlexNetOptions o;
  o.common.read(r);
  o.dropout = r.get("dropout", o.dropout, 0.0, 0.99);
  o.lrn = r.get("lrn", o.lrn);
  r.finish();
  return o;
}

json AlexNetOptions::to_json() const {
  json j = {{"name", "alexnet"}, {"dropout", dropout}, {"lrn", lrn}};
  common.write(j);
  return j;
}

AlexNet::AlexNet(const AlexNetOptions& o) : FeatureClassifier("alexnet", o.common), opts_(o) {
  // Channel widths: torchvision's, or the original paper's with LRN.
  const int64_t c1 = o.lrn ? 96 : 64, c2 = o.lrn ? 256 : 192, c4 = o.lrn ? 384 : 256;
  auto lrn = [] {
    LocalResponseNormOptions l;
    l.size = 5;
    l.alpha = 1e-4;
    l.beta = 0.75;
    l.k = 2.0;
    return std::make_shared<LocalResponseNorm>(l);
  };
  features_ = register_module("features", std::make_shared<Sequential>());
  Sequential& f = *features_;
  f.push_back(conv(o.common.in_channels, c1, 11, 4, 2, true));
  f.push_back(relu());
  if (o.lrn) f.push_back(lrn());
  f.push_back(max_pool(3, 2));
  f.push_back(conv(c1, c2, 5, 1, 2, true));
  f.push_back(relu());
  if (o.lrn) f.push_back(lrn());
  f.push_back(max_pool(3, 2));
  f.push_back(conv(c2, 384, 3, 1, 1, true));
  f.push_back(relu());
  f.push_back(conv(384, c4, 3, 1, 1, true));
  f.push_back(relu());
  f.push_back(conv(c4, 256, 3, 1, 1, true));
  f.push_back(relu());
  f.push_back(max_pool(3, 2));
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(AdaptiveAvgPool2dOptions{6}));
  classifier_ = register_module("classifier", std::make_shared<Sequential>());
  Sequential& c = *classifier_;
  c.push_back(dropout(o.dropout));
  c.push_back(linear(256 * 6 * 6, 4096));
  c.push_back(relu());
  c.push_back(dropout(o.dropout));
  c.push_back(linear(4096, 4096));
  c.push_back(relu());
  c.push_back(linear(4096, o.common.num_classes));
  finish_build(256, 6, 6);
}

}  // namespace kiln::models
