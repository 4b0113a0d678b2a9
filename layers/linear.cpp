#include "layers/linear.h"

#include "core/autograd.h"
#include "core/ops/linear.h"
#include "layers/init.h"
#include "layers/options.h"

namespace kiln {

LinearOptions LinearOptions::from_json(const json& j, const std::string& path) {
  JsonReader r = layer_reader(j, path);
  LinearOptions o;
  o.in_features = require_int(r, "in_features");
  o.out_features = require_int(r, "out_features");
  o.bias = r.get("bias", o.bias);
  o.init = r.get_choice("init", o.init, {"default", "normal"});
  r.finish();
  return o;
}

json LinearOptions::to_json() const {
  return {{"type", "linear"}, {"in_features", in_features}, {"out_features", out_features}, {"bias", bias}, {"init", init}};
}

Linear::Linear(const LinearOptions& o) : Module("linear"), opts_(o) {
  KILN_CHECK(o.in_features > 0 && o.out_features > 0, "linear: in_features ", o.in_features, " and out_features ",
             o.out_features, " must be positive");
  KILN_CHECK(o.init == "default" || o.init == "normal", "linear: init '", o.init,
             "' is not accepted; accepted: default, normal");
  Shape ws{o.out_features, o.in_features};
  bool normal = o.init == "normal";
  weight = register_parameter("weight", normal ? init::normal(ws, 0.01) : init::torch_default_weight(ws));
  if (o.bias)
    bias = register_parameter("bias", normal ? Tensor::zeros({o.out_features})
                                             : init::torch_default_bias(o.out_features, o.in_features));
}

Tensor Linear::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 2 && x.size(1) == opts_.in_features, "linear(", opts_.in_features, " -> ", opts_.out_features,
             "): input ", x.str(), " must be (N, ", opts_.in_features, ")");
  return ops::linear(x, param_for_input(weight, x), param_for_input(bias, x));
}

Tensor Flatten::forward(const Tensor& x) {
  if (x.dim() == 2) return x;
  KILN_CHECK(x.dim() == 4, "flatten: input ", x.str(), " must be (N, H, W, C) or (N, features)");
  // One channel or one position: (h, w, c) and (c, h, w) are the same order, a view does it.
  if (x.size(3) == 1 || x.size(1) * x.size(2) == 1) return x.flatten(1);
  // NHWC -> NCHW in one contiguous copy, viewed as (N, C*H*W). One node: its backward views the
  // gradient as (N, C, H, W) and copies it back to a contiguous NHWC gradient (the layer before
  // gets a plain tensor, not a strided view).
  const Shape nchw{x.size(0), x.size(3), x.size(1), x.size(2)};
  Tensor y = x.detach().permute({0, 3, 1, 2}).contiguous().view({nchw[0], nchw[1] * nchw[2] * nchw[3]});
  return record("flatten", {x}, y, [nchw](const Tensor& g) {
    return grads{g.reshape(nchw).permute({0, 2, 3, 1}).contiguous()};
  });
}

}  // namespace kiln
