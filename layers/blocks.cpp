#include "layers/blocks.h"

#include <algorithm>

#include "core/ops/batch_norm.h"
#include "core/ops/channel_moments.h"
#include "core/ops/conv_fusion.h"
#include "core/ops/elementwise.h"
#include "core/ops/pool.h"
#include "core/ops/reduce.h"
#include "core/ops/scale_add_relu.h"
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
  o.fused_bn_conv = r.get("fused_bn_conv", o.fused_bn_conv);
  o.se_reduction = r.get("se_reduction", o.se_reduction, int64_t{0}, kMaxSize);
  r.finish();
  return o;
}

json BlockOptions::to_json(const std::string& type) const {
  json j = {{"type", type},         {"in_channels", in_channels},
            {"planes", planes},     {"stride", stride},
            {"shortcut", shortcut}, {"zero_init_residual", zero_init_residual}};
  j["fused_bn_conv"] = fused_bn_conv;
  if (se_reduction > 0) j["se_reduction"] = se_reduction;  // absent: the blocks' JSON from before the key
  return j;
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

SqueezeExcite::SqueezeExcite(int64_t channels, int64_t reduction) : Module("squeeze_excite") {
  KILN_CHECK(channels > 0 && reduction > 0, "squeeze_excite: channels ", channels, " and reduction ", reduction,
             " must be positive");
  const int64_t hidden = std::max<int64_t>(1, channels / reduction);
  fc1 = register_module("fc1", std::make_shared<Linear>(LinearOptions{channels, hidden}));
  fc2 = register_module("fc2", std::make_shared<Linear>(LinearOptions{hidden, channels}));
}

json SqueezeExcite::to_json() const {
  return {{"type", "squeeze_excite"}, {"channels", fc1->options().in_features},
          {"hidden", fc1->options().out_features}};
}

Tensor sigmoid(const Tensor& z) {
  const Tensor clamped = ops::add_scalar(ops::sub(ops::relu(ops::add_scalar(z, 30.0)), ops::relu(ops::add_scalar(z, -30.0))), -30.0);
  const Tensor denom = ops::add_scalar(ops::exp(ops::neg(clamped)), 1.0);
  return ops::div(Tensor::ones(z.shape(), z.dtype(), z.device()), denom);
}

Tensor SqueezeExcite::gate(const Tensor& x) {
  KILN_CHECK(x.dim() == 4, "squeeze_excite: expects an (N, H, W, C) input, got ", x.str());
  return sigmoid(fc2->forward(ops::relu(fc1->forward(ops::global_avg_pool(x)))));
}

Tensor SqueezeExcite::forward(const Tensor& x) {
  return ops::mul(x, gate(x).reshape({x.size(0), 1, 1, x.size(3)}));
}

void ResidualBlock::make_shortcut() {
  if (opts_.se_reduction > 0) se = register_module("se", std::make_shared<SqueezeExcite>(out_channels(), opts_.se_reduction));
  bool changes = opts_.stride != 1 || opts_.in_channels != out_channels();
  if (!changes || opts_.shortcut != "B") return;
  downsample_ = register_module("downsample", std::make_shared<Sequential>());
  downsample_->push_back(conv(opts_.in_channels, out_channels(), 1, opts_.stride));
  downsample_->push_back(std::make_shared<BatchNorm2d>(BatchNormOptions{out_channels()}));
}

Tensor ResidualBlock::finish(const Tensor& pre_bn, BatchNorm2d& bn, const Tensor& x) {
  if (se) {
    const Tensor branch = bn.forward(pre_bn);
    return ops::scale_add_relu(branch, se->gate(branch), shortcut(x));
  }
  return bn.forward_relu(pre_bn, shortcut(x));
}

Tensor ResidualBlock::shortcut(const Tensor& x) {
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
  return identity;
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
  if (opts_.fused_bn_conv && is_training() && !bn1->is_frozen()) return forward_fused(x);
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
  if (opts_.fused_bn_conv && is_training() && !bn1->is_frozen() && !bn2->is_frozen()) return forward_fused(x);
  Tensor out = bn1->forward_relu(conv1->forward(x));
  out = bn2->forward_relu(conv2->forward(out));
  return finish(conv3->forward(out), *bn3, x);
}

namespace {

ops::Conv2dParams params_of(const Conv2d& c) {
  const Conv2dOptions& o = c.options();
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = o.stride;
  p.pad_h = p.pad_w = o.padding;
  p.dilation_h = p.dilation_w = o.dilation;
  p.groups = o.groups;
  return p;
}

// bn's training step from the sums of its input y (count values per channel): scale and bias in
// `out` (recorded: the gradient reaches the sums, gamma and beta), the running statistics updated
// (not in a recomputation, which must not update them twice) and num_batches_tracked counted, as
// BatchNorm2d::forward does.
ops::BnFinalized finalize(BatchNorm2d& bn, const Tensor& sum, const Tensor& sumsq, int64_t count, DType out) {
  const bool recompute = is_recomputing();
  const BatchNormOptions& o = bn.options();
  ops::BnFinalized f = ops::bn_finalize(sum, sumsq, count, bn.weight, bn.bias, recompute ? Tensor() : bn.running_mean,
                                        recompute ? Tensor() : bn.running_var, o.momentum, o.eps, out);
  if (!recompute)
    increment_i64_kernel.get(bn.num_batches_tracked.device(), bn.type().c_str())(bn.num_batches_tracked, 1);
  return f;
}

// A block's first convolution with its output's per-channel sums (for bn1): through the fused op with
// scale 1 and bias 0 when the input is known to be >= 0 (relu(x) = x; the sums from the kernel's
// epilogue), else a plain convolution and ops::channel_moments.
ops::ConvBnStats first_conv_with_sums(Conv2d& conv, const Tensor& x, bool input_after_relu) {
  if (input_after_relu && !conv.bias.defined()) {
    const int64_t cin = x.size(3);
    return ops::conv_scale_bias_relu_stats_train(x, Tensor::ones({cin}, x.dtype(), x.device()),
                                                 Tensor::zeros({cin}, x.dtype(), x.device()),
                                                 param_for_input(conv.weight, x), params_of(conv));
  }
  Tensor y = conv.forward(x);
  ops::ChannelMoments m = ops::channel_moments(y);
  return {y, m.sum, m.sumsq};
}

}  // namespace

Tensor Bottleneck::forward_fused(const Tensor& x) {
  const ops::ConvBnStats s1 = first_conv_with_sums(*conv1, x, opts_.input_after_relu);
  const Tensor& y1 = s1.y;
  const DType dt = y1.dtype();
  ops::BnFinalized f1 = finalize(*bn1, s1.sum, s1.sumsq, y1.numel() / y1.size(3), dt);
  ops::ConvBnStats s2 = ops::conv_scale_bias_relu_stats_train(y1, f1.scale, f1.bias, param_for_input(conv2->weight, y1),
                                                              params_of(*conv2));
  ops::BnFinalized f2 = finalize(*bn2, s2.sum, s2.sumsq, s2.y.numel() / s2.y.size(3), dt);
  ops::ConvBnStats s3 = ops::conv_scale_bias_relu_stats_train(s2.y, f2.scale, f2.bias,
                                                              param_for_input(conv3->weight, s2.y), params_of(*conv3));
  return finish(s3.y, *bn3, x);
}

Tensor BasicBlock::forward_fused(const Tensor& x) {
  const ops::ConvBnStats s1 = first_conv_with_sums(*conv1, x, opts_.input_after_relu);
  ops::BnFinalized f1 = finalize(*bn1, s1.sum, s1.sumsq, s1.y.numel() / s1.y.size(3), s1.y.dtype());
  ops::ConvBnStats s2 = ops::conv_scale_bias_relu_stats_train(s1.y, f1.scale, f1.bias,
                                                              param_for_input(conv2->weight, s1.y), params_of(*conv2));
  return finish(s2.y, *bn2, x);
}

}  // namespace kiln
