#include "layers/blocks.h"

#include "core/ops/elementwise.h"
#include "core/ops/shape_ops.h"
#include "layers/options.h"

namespace kiln {

BlockOptions BlockOptions::from_json(const json& j, const std::string& path, const std::string& type) {
  JsonReader r = layer_reader(j, path);
  BlockOptions o;
  o.in_channels = require_int(r, "in_channels");
  o.planes = require_int(r, "planes");
  o.stride = r.get("stride", o.stride, int64_t{1}, int64_t{64});
  o.shortcut = type == "bottleneck" ? r.get_choice("shortcut", o.shortcut, {"B"})
                                    : r.get_choice("shortcut", o.shortcut, {"A", "B"});
  o.zero_init_residual = r.get("zero_init_residual", o.zero_init_residual);
  r.finish();
  return o;
}

json BlockOptions::to_json(const std::string& type) const {
  return {{"type", type},         {"in_channels", in_channels},
          {"planes", planes},     {"stride", stride},
          {"shortcut", shortcut}, {"zero_init_residual", zero_init_residual}};
}

ResidualBlock::ResidualBlock(const std::string& type, const BlockOptions& o, int64_t expansion)
    : Module(type), opts_(o), expansion_(expansion) {
  KILN_CHECK(o.in_channels > 0 && o.planes > 0 && o.stride > 0, type, ": in_channels ", o.in_channels, ", planes ",
             o.planes, " and stride ", o.stride, " must be positive");
  KILN_CHECK(o.shortcut == "B" || (o.shortcut == "A" && expansion == 1), type, ": shortcut '", o.shortcut,
             "' is not accepted; accepted: ", expansion == 1 ? "A, B" : "B");
  KILN_CHECK(o.shortcut != "A" || o.planes >= o.in_channels, type, ": shortcut A cannot reduce channels (",
             o.in_channels, " -> ", o.planes, ")");
}

std::shared_ptr<Conv2d> ResidualBlock::conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  Conv2dOptions c;
  c.in_channels = in;
  c.out_channels = out;
  c.kernel_size = kernel;
  c.stride = stride;
  c.padding = kernel / 2;
  c.bias = false;
  c.init = "kaiming_normal";
  return std::make_shared<Conv2d>(c);
}

void ResidualBlock::make_shortcut() {
  bool changes = opts_.stride != 1 || opts_.in_channels != out_channels();
  if (!changes || opts_.shortcut != "B") return;
  downsample_ = register_module("downsample", std::make_shared<Sequential>());
  downsample_->push_back(conv(opts_.in_channels, out_channels(), 1, opts_.stride));
  downsample_->push_back(std::make_shared<BatchNorm2d>(BatchNormOptions{out_channels()}));
}

Tensor ResidualBlock::finish(const Tensor& pre_bn, BatchNorm2d& bn, const Tensor& x) {
  Tensor identity = x;
  if (downsample_) {
    identity = downsample_->forward(x);
  } else if (opts_.stride != 1 || opts_.in_channels != out_channels()) {
    // Option A: x[:, ::s, ::s, :] with zero channels added on both sides. x: (N, H, W, Cin)
    if (opts_.stride != 1) identity = x.slice(1, 0, x.size(1), opts_.stride).slice(2, 0, x.size(2), opts_.stride);
    int64_t extra = out_channels() - opts_.in_channels;
    if (extra > 0) {
      Shape pad = identity.shape();
      pad[3] = extra / 2;
      Tensor before = Tensor::zeros(pad, x.dtype(), x.device());
      pad[3] = extra - extra / 2;
      Tensor after = Tensor::zeros(pad, x.dtype(), x.device());
      identity = ops::concat({before, identity, after}, 3);
    } else {
      identity = identity.contiguous();
    }
  }
  return bn.forward_relu(pre_bn, identity);
}

BasicBlock::BasicBlock(const BlockOptions& o) : ResidualBlock("basic_block", o, kExpansion) {
  conv1 = register_module("conv1", conv(o.in_channels, o.planes, 3, o.stride));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(BatchNormOptions{o.planes}));
  conv2 = register_module("conv2", conv(o.planes, o.planes, 3, 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(BatchNormOptions{o.planes}));
  if (o.zero_init_residual) bn2->weight.zero_();
  make_shortcut();
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = bn1->forward_relu(conv1->forward(x));
  return finish(conv2->forward(out), *bn2, x);
}

Bottleneck::Bottleneck(const BlockOptions& o) : ResidualBlock("bottleneck", o, kExpansion) {
  int64_t width = o.planes;
  conv1 = register_module("conv1", conv(o.in_channels, width, 1, 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(BatchNormOptions{width}));
  conv2 = register_module("conv2", conv(width, width, 3, o.stride));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(BatchNormOptions{width}));
  conv3 = register_module("conv3", conv(width, out_channels(), 1, 1));
  bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(BatchNormOptions{out_channels()}));
  if (o.zero_init_residual) bn3->weight.zero_();
  make_shortcut();
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = bn1->forward_relu(conv1->forward(x));
  out = bn2->forward_relu(conv2->forward(out));
  return finish(conv3->forward(out), *bn3, x);
}

}  // namespace kiln
