#include "layers/conv.h"

#include "core/ops/conv2d.h"
#include "layers/init.h"
#include "layers/options.h"

namespace kiln {

Conv2dOptions Conv2dOptions::from_json(const json& j, const std::string& path) {
  JsonReader r = layer_reader(j, path);
  Conv2dOptions o;
  o.in_channels = require_int(r, "in_channels");
  o.out_channels = require_int(r, "out_channels");
  o.kernel_size = require_int(r, "kernel_size", 1, 1024);
  o.stride = r.get("stride", o.stride, int64_t{1}, int64_t{1024});
  o.padding = r.get("padding", o.padding, int64_t{0}, int64_t{1024});
  o.dilation = r.get("dilation", o.dilation, int64_t{1}, int64_t{1024});
  o.groups = r.get("groups", o.groups, int64_t{1}, kMaxSize);
  o.bias = r.get("bias", o.bias);
  o.init = r.get_choice("init", o.init, {"default", "kaiming_normal"});
  r.finish();
  KILN_CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0, "config: ", path,
             ": in_channels ", o.in_channels, " and out_channels ", o.out_channels, " must be multiples of groups ",
             o.groups);
  return o;
}

json Conv2dOptions::to_json() const {
  return {{"type", "conv2d"},         {"in_channels", in_channels}, {"out_channels", out_channels},
          {"kernel_size", kernel_size}, {"stride", stride},          {"padding", padding},
          {"dilation", dilation},       {"groups", groups},          {"bias", bias},
          {"init", init}};
}

Conv2d::Conv2d(const Conv2dOptions& o) : Module("conv2d"), opts_(o) {
  KILN_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.kernel_size > 0 && o.stride > 0 && o.dilation > 0 &&
                 o.groups > 0 && o.padding >= 0,
             "conv2d: invalid options in_channels ", o.in_channels, " out_channels ", o.out_channels, " kernel_size ",
             o.kernel_size, " stride ", o.stride, " padding ", o.padding, " dilation ", o.dilation, " groups ",
             o.groups);
  KILN_CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0, "conv2d: in_channels ", o.in_channels,
             " and out_channels ", o.out_channels, " must be multiples of groups ", o.groups);
  KILN_CHECK(o.init == "default" || o.init == "kaiming_normal", "conv2d: init '", o.init,
             "' is not accepted; accepted: default, kaiming_normal");
  Shape ws{o.out_channels, o.kernel_size, o.kernel_size, o.in_channels / o.groups};
  bool kaiming = o.init == "kaiming_normal";
  weight = register_parameter("weight", kaiming ? init::kaiming_normal_fan_out(ws) : init::torch_default_weight(ws));
  if (o.bias)
    bias = register_parameter("bias", kaiming ? Tensor::zeros({o.out_channels})
                                              : init::torch_default_bias(o.out_channels, init::fan_in(ws)));
}

Tensor Conv2d::forward(const Tensor& x) {
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = opts_.stride;
  p.pad_h = p.pad_w = opts_.padding;
  p.dilation_h = p.dilation_w = opts_.dilation;
  p.groups = opts_.groups;
  return ops::conv2d(x, param_for_input(weight, x), param_for_input(bias, x), p);
}

}  // namespace kiln
