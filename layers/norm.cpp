#include "layers/norm.h"

#include "core/ops/batch_norm.h"
#include "core/ops/lrn.h"
#include "layers/options.h"

namespace kiln {

BatchNormOptions BatchNormOptions::from_json(const json& j, const std::string& path) {
  JsonReader r = layer_reader(j, path);
  BatchNormOptions o;
  o.num_features = require_int(r, "num_features");
  o.eps = r.get("eps", o.eps, 0.0, 1.0);
  o.momentum = r.get("momentum", o.momentum, 0.0, 1.0);
  r.finish();
  return o;
}

json BatchNormOptions::to_json(const std::string& type) const {
  return {{"type", type}, {"num_features", num_features}, {"eps", eps}, {"momentum", momentum}};
}

BatchNorm2d::BatchNorm2d(const BatchNormOptions& o, const std::string& type) : Module(type), opts_(o) {
  KILN_CHECK(o.num_features > 0, type, ": num_features ", o.num_features, " must be positive");
  int64_t c = o.num_features;
  weight = register_parameter("weight", Tensor::ones({c}));
  bias = register_parameter("bias", Tensor::zeros({c}));
  running_mean = register_buffer("running_mean", Tensor::zeros({c}));
  running_var = register_buffer("running_var", Tensor::ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", Tensor::zeros({}, DType::i64));
}

Tensor BatchNorm2d::forward(const Tensor& x) { return run(x, false, Tensor()); }

Tensor BatchNorm2d::forward_relu(const Tensor& x, const Tensor& residual) { return run(x, true, residual); }

Tensor BatchNorm2d::run(const Tensor& x, bool relu, const Tensor& residual) {
  KILN_CHECK((x.dim() == 4 || x.dim() == 2) && x.size(-1) == opts_.num_features, type(), "(", opts_.num_features,
             "): input ", x.str(), " must be (N, H, W, ", opts_.num_features, ") or (N, ", opts_.num_features, ")");
  // Frozen (fine-tuning): the running statistics normalise and stay as they are, in training too.
  bool train = is_training() && !is_frozen();
  Tensor mean = running_mean, var = running_var;
  // The first run already updated the running statistics; a recomputation must not again.
  const bool recompute = train && is_recomputing();
  if (recompute) mean = running_mean.detach().clone(), var = running_var.detach().clone();
  Tensor y = relu ? ops::batch_norm_relu(x, weight, bias, mean, var, train, opts_.momentum, opts_.eps, residual)
                  : ops::batch_norm(x, weight, bias, mean, var, train, opts_.momentum, opts_.eps);
  // On the counter's own device: reading it back would sync every layer on a GPU.
  if (train && !recompute)
    increment_i64_kernel.get(num_batches_tracked.device(), type().c_str())(num_batches_tracked, 1);
  return y;
}

LocalResponseNormOptions LocalResponseNormOptions::from_json(const json& j, const std::string& path) {
  JsonReader r = layer_reader(j, path);
  LocalResponseNormOptions o;
  o.size = require_int(r, "size", 1, 1024);
  o.alpha = r.get("alpha", o.alpha, 0.0, 1e6);
  o.beta = r.get("beta", o.beta, 0.0, 1e6);
  o.k = r.get("k", o.k, 0.0, 1e6);
  r.finish();
  return o;
}

json LocalResponseNormOptions::to_json() const {
  return {{"type", "local_response_norm"}, {"size", size}, {"alpha", alpha}, {"beta", beta}, {"k", k}};
}

LocalResponseNorm::LocalResponseNorm(const LocalResponseNormOptions& o) : Module("local_response_norm"), opts_(o) {
  KILN_CHECK(o.size > 0, "local_response_norm: size ", o.size, " must be positive");
}

Tensor LocalResponseNorm::forward(const Tensor& x) {
  return ops::local_response_norm(x, opts_.size, opts_.alpha, opts_.beta, opts_.k);
}

}  // namespace kiln
