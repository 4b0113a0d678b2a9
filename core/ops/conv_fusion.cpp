// The fused BN-affine + ReLU + conv + statistics op (see conv_fusion.h): checks, then the device's
// fused kernel when it has one and no input needs a gradient, else the chain of public ops.
#include "core/ops/conv_fusion.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(conv_bn_stats_forward);
}  // namespace kiln

namespace kiln::ops {
namespace {
constexpr const char* kOp = "conv_scale_bias_relu_stats";

void check_args(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& w, const Conv2dParams& p) {
  KILN_CHECK(x.defined() && scale.defined() && bias.defined() && w.defined(), kOp,
             ": x, scale, bias and w must be defined tensors");
  const DType dt = x.dtype();
  KILN_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16, kOp, ": x ", x.str(),
             ": accepted dtypes are f16, bf16 and f32 (conv2d's)");
  KILN_CHECK(scale.dtype() == dt && bias.dtype() == dt && w.dtype() == dt, kOp, ": x ", x.str(), ", scale ",
             scale.str(), ", bias ", bias.str(), " and w ", w.str(), " must share one dtype");
  KILN_CHECK(x.dim() == 4 && w.dim() == 4, kOp, ": x must be (N, H, W, Cin) and w (Cout, KH, KW, Cin), got x ",
             x.str(), " and w ", w.str());
  const int64_t cin = x.shape()[3];
  KILN_CHECK(scale.dim() == 1 && bias.dim() == 1 && scale.shape()[0] == cin && bias.shape()[0] == cin, kOp,
             ": scale ", scale.str(), " and bias ", bias.str(), " must be (Cin) = (", cin, ") for x ", x.str());
  KILN_CHECK(p.groups == 1 && w.shape()[3] == cin, kOp, ": w ", w.str(), " must be (Cout, KH, KW, ", cin,
             ") with groups 1 for x ", x.str(), " (groups ", p.groups, ")");
}
}  // namespace

ConvBnStats conv_scale_bias_relu_stats_unfused(const Tensor& x, const Tensor& scale, const Tensor& bias,
                                               const Tensor& w, const Conv2dParams& p) {
  check_args(x, scale, bias, w, p);
  Tensor a = relu(add(mul(x, scale), bias));  // (Cin) broadcasts over NHWC's last dim
  Tensor y = conv2d(a, w, Tensor(), p);
  Tensor yf = y.dtype() == DType::f32 ? y : y.to(DType::f32);
  return {y, sum(yf, {0, 1, 2}), sum(square(yf), {0, 1, 2})};
}

ConvBnStats conv_scale_bias_relu_stats(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& w,
                                       const Conv2dParams& p, ConvFusionChoice* how) {
  const Device d = op_device(kOp, {x, scale, bias, w});
  check_args(x, scale, bias, w, p);
  conv2d_output_shape(x.shape(), w.shape(), p);  // conv2d's own shape checks, before any kernel
  const bool recording =
      grad_enabled() && (x.requires_grad() || scale.requires_grad() || bias.requires_grad() || w.requires_grad());
  const auto fused = conv_bn_stats_forward_kernel.find(d, kOp);
  if (how) *how = ConvFusionChoice{};
  if (recording || fused == nullptr || x.shape()[0] == 0) {
    if (how) how->why = recording ? "autograd records the unfused ops" : fused ? "empty batch" : "no fused kernel on " + d.str();
    return conv_scale_bias_relu_stats_unfused(x, scale, bias, w, p);
  }
  // The fused graph reads dense NHWC / KRSC buffers.
  const Tensor xd = x.detach().contiguous(), sd = scale.detach().contiguous(), bd = bias.detach().contiguous(),
               wd = w.detach().contiguous();
  const ConvFusionUnfused unfused = [&] { return conv_scale_bias_relu_stats_unfused(xd, sd, bd, wd, p); };
  return fused(xd, sd, bd, wd, p, unfused, how);
}

BnFinalized bn_finalize(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma, const Tensor& beta,
                        const Tensor& running_mean, const Tensor& running_var, double momentum, double eps, DType out) {
  constexpr const char* op = "bn_finalize";
  KILN_CHECK(sum.defined() && sumsq.defined() && sum.dim() == 1 && sumsq.shape() == sum.shape(), op,
             ": sum and sumsq must be (C) tensors of one shape, got ", sum.defined() ? sum.str() : "undefined", " and ",
             sumsq.defined() ? sumsq.str() : "undefined");
  KILN_CHECK(count >= 2, op, ": count ", count, ": needs at least 2 values per channel (the unbiased variance)");
  KILN_CHECK(running_mean.defined() == running_var.defined(), op,
             ": running_mean and running_var must both be defined or both undefined");
  const int64_t C = sum.shape()[0];
  for (const Tensor* t : {&gamma, &beta, &running_mean, &running_var})
    KILN_CHECK(!t->defined() || (t->dim() == 1 && t->shape()[0] == C), op, ": ", t->str(), " must be (", C,
               ") like sum ", sum.str());
  KILN_CHECK(!running_mean.defined() || (running_mean.dtype() == DType::f32 && running_var.dtype() == DType::f32), op,
             ": running statistics must be f32, got ", running_mean.str(), " and ", running_var.str());
  NoGradGuard ng;
  auto f32 = [](const Tensor& t) { return t.dtype() == DType::f32 ? t.detach() : t.detach().to(DType::f32); };
  const double n = static_cast<double>(count);
  Tensor mean = mul_scalar(f32(sum), 1.0 / n);
  Tensor var = relu(sub(mul_scalar(f32(sumsq), 1.0 / n), square(mean)));
  Tensor invstd = div(add_scalar(mul_scalar(var, 0.0), 1.0), sqrt(add_scalar(var, eps)));
  Tensor scale = gamma.defined() ? mul(f32(gamma), invstd) : invstd;
  Tensor bias = sub(beta.defined() ? f32(beta) : mul_scalar(mean, 0.0), mul(mean, scale));
  if (running_mean.defined()) {
    copy_tensor(running_mean, add(mul_scalar(running_mean.detach(), 1.0 - momentum), mul_scalar(mean, momentum)));
    copy_tensor(running_var,
                add(mul_scalar(running_var.detach(), 1.0 - momentum), mul_scalar(var, momentum * n / (n - 1.0))));
  }
  return {scale.dtype() == out ? scale : scale.to(out), bias.dtype() == out ? bias : bias.to(out), mean, invstd};
}

}  // namespace kiln::ops
