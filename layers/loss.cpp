// The loss registry (loss.h): kiln's cross-entropy, added on first use.
#include "layers/loss.h"

#include "core/ops/loss.h"

namespace kiln {

Tensor cross_entropy_loss(const Tensor& logits, const Tensor& targets, const LossContext& c) {
  return targets.dtype() == DType::i64 ? ops::cross_entropy(logits, targets, c.label_smoothing, c.class_weights)
                                       : ops::soft_cross_entropy(logits, targets, 0.0, c.class_weights);
}

Registry<LossMaker>& loss_registry() {
  static Registry<LossMaker> r = [] {
    Registry<LossMaker> b("a loss");
    b.add("cross_entropy",
          [](const json& j, const LossContext& c, const std::string& path) -> LossFunction {
            JsonReader r(j, path);
            r.allow("name");
            r.finish();
            return [c](const Tensor& logits, const Tensor& targets) { return cross_entropy_loss(logits, targets, c); };
          },
          {"softmax cross-entropy, with train.label_smoothing and train.class_weights", json::object(), {"LossKeys"}, {}});
    return b;
  }();
  return r;
}

void register_loss(const std::string& name, LossMaker make, ComponentDocs docs, const SourcePlace& where) {
  loss_registry().add(name, std::move(make), std::move(docs), where);
}

json loss_options(const json& given, const std::string& path) {
  if (given.is_string()) return json{{"name", given}};
  KILN_CHECK(given.is_object(), "config: ", path, " must be a loss's name (\"cross_entropy\") or an object {\"name\": ...}, not ",
             json_type_name(given), " ", given.dump());
  return given;
}

LossFunction make_loss(const json& options, const LossContext& context, const std::string& path) {
  const LossMaker& make = loss_registry().lookup(options, path, "name");
  const std::string name = options["name"].get<std::string>();
  return call_component(path, "name", name, loss_registry().entry(name)->place, [&] { return make(options, context, path); });
}

}  // namespace kiln
