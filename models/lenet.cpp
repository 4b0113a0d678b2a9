#include "models/lenet.h"

#include "layers/options.h"

namespace kiln::models {

LeNetOptions LeNetOptions::from_json(const json& j, const std::string& path) {
  JsonReader r(j, path);
  r.allow("name");
  LeNetOptions o;
  o.common.read(r);
  o.input_size = r.get("input_size", o.input_size, int64_t{4}, int64_t{4096});
  o.dropout = r.get("dropout", o.dropout, 0.0, 0.99);
  r.finish();
  return o;
}

json LeNetOptions::to_json() const {
  json j = {{"name", "lenet"}, {"input_size", input_size}, {"dropout", dropout}};
  common.write(j);
  return j;
}

LeNet::LeNet(const LeNetOptions& o) : FeatureClassifier("lenet", o.common), opts_(o) {
  KILN_CHECK(o.input_size >= 4, "lenet: input_size ", o.input_size, " must be at least 4");
  features_ = register_module("features", std::make_shared<Sequential>());
  features_->push_back(conv(o.common.in_channels, 32, 3, 1, 1, false));
  features_->push_back(batch_norm(32));
  features_->push_back(max_pool(2, 2));
  features_->push_back(relu());
  features_->push_back(conv(32, 64, 3, 1, 1, false));
  features_->push_back(batch_norm(64));
  features_->push_back(max_pool(2, 2));
  features_->push_back(relu());
  int64_t s = o.input_size / 2 / 2;
  classifier_ = register_module("classifier", std::make_shared<Sequential>());
  classifier_->push_back(linear(64 * s * s, 128));
  classifier_->push_back(relu());
  classifier_->push_back(dropout(o.dropout));
  classifier_->push_back(linear(128, o.common.num_classes));
  finish_build(64, s, s);
}

}  // namespace kiln::models
