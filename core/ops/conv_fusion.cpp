// The fused BN-affine + ReLU + conv + statistics op (see conv_fusion.h): checks, then the device's
// fused kernel when it has one and no input needs a gradient, else the chain of public ops; the
// training op (the same forward, its own backward); the counts of what ran fused.
#include "core/ops/conv_fusion.h"

#include <atomic>

#include "core/autograd.h"
#include "core/ops/channel_moments.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(conv_bn_stats_forward);
KILN_DEFINE_KERNEL_SLOT(conv_bn_stats_backward);
}  // namespace kiln

namespace kiln::ops {
namespace {
constexpr const char* kOp = "conv_scale_bias_relu_stats";

struct AtomicCounts {
  std::atomic<int64_t> forward{0}, forward_fused{0}, dgrad{0}, dgrad_fused{0}, wgrad{0}, wgrad_fused{0};
};
AtomicCounts g_counts;  // conv_fusion_counts()

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
  ConvFusionChoice local;
  ConvFusionChoice* h = how ? how : &local;
  ConvBnStats r = fused(xd, sd, bd, wd, p, unfused, h);
  g_counts.forward.fetch_add(1, std::memory_order_relaxed);
  if (h->fused) g_counts.forward_fused.fetch_add(1, std::memory_order_relaxed);
  return r;
}

ConvFusionCounts conv_fusion_counts() {
  auto get = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  return {get(g_counts.forward), get(g_counts.forward_fused), get(g_counts.dgrad),
          get(g_counts.dgrad_fused), get(g_counts.wgrad), get(g_counts.wgrad_fused)};
}

void reset_conv_fusion_counts() {
  for (std::atomic<int64_t>* a : {&g_counts.forward, &g_counts.forward_fused, &g_counts.dgrad, &g_counts.dgrad_fused,
                                  &g_counts.wgrad, &g_counts.wgrad_fused})
    a->store(0, std::memory_order_relaxed);
}

namespace {
void check_backward_args(const Tensor& gy, const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& w,
                         const Conv2dParams& p) {
  check_args(x, scale, bias, w, p);
  const Shape ys = conv2d_output_shape(x.shape(), w.shape(), p);
  KILN_CHECK(gy.defined() && gy.shape() == ys && gy.dtype() == x.dtype(), kOp, " backward: gy ",
             gy.defined() ? gy.str() : "undefined", " must have y's shape ", shape_str(ys), " and x's dtype ",
             dtype_name(x.dtype()));
}
}  // namespace

ConvBnGrads conv_scale_bias_relu_backward_unfused(const Tensor& gy, const Tensor& x, const Tensor& scale,
                                                  const Tensor& bias, const Tensor& w, const Conv2dParams& p,
                                                  const ConvFusionNeeds& need) {
  const Device d = op_device(kOp, {gy, x, scale, bias, w});
  check_backward_args(gy, x, scale, bias, w, p);
  ConvBnGrads out;
  if (!need.act() && !need.w) return out;
  NoGradGuard ng;
  const Tensor xd = x.detach(), sd = scale.detach(), bd = bias.detach(), wd = w.detach();
  Conv2dBackwardArgs args;
  args.x_shape = x.shape();
  args.w_shape = w.shape();
  args.p = p;
  args.dtype = x.dtype();
  args.need_x = need.act();  // da
  args.need_w = need.w;
  const Tensor a = relu(add(mul(xd, sd), bd));  // recomputed, rounded as the forward's
  const Conv2dGrads cg = conv2d_backward_kernel.get(d, kOp)(gy.detach().contiguous(), args.need_w ? a : Tensor(),
                                                            args.need_x ? wd : Tensor(), args);
  if (need.w) out.dw = cg.dw;
  if (!need.act()) return out;
  const Tensor da = relu_backward(cg.dx, a);  // 0 where a <= 0
  const DType dt = xd.dtype();
  auto f32 = [](const Tensor& t) { return t.dtype() == DType::f32 ? t : t.to(DType::f32); };
  auto back = [dt](const Tensor& t) { return t.dtype() == dt ? t : t.to(dt); };
  if (need.x) out.dx = mul(da, sd);
  if (need.scale) out.dscale = back(sum(mul(f32(da), f32(xd)), {0, 1, 2}));
  if (need.bias) out.dbias = back(sum(f32(da), {0, 1, 2}));
  return out;
}

ConvBnGrads conv_scale_bias_relu_backward(const Tensor& gy, const Tensor& x, const Tensor& scale, const Tensor& bias,
                                          const Tensor& w, const Conv2dParams& p, const ConvFusionNeeds& need,
                                          ConvFusionBackwardChoice* how) {
  const Device d = op_device(kOp, {gy, x, scale, bias, w});
  check_backward_args(gy, x, scale, bias, w, p);
  if (how) {
    *how = ConvFusionBackwardChoice{};
    how->dgrad.why = how->wgrad.why = "not needed";
  }
  const auto fused = conv_bn_stats_backward_kernel.find(d, kOp);
  if (fused == nullptr || x.shape()[0] == 0 || (!need.act() && !need.w)) {
    if (how) {
      const std::string why = fused ? "empty batch or nothing needed" : "no fused kernel on " + d.str();
      if (need.act()) how->dgrad.why = why;
      if (need.w) how->wgrad.why = why;
    }
    return conv_scale_bias_relu_backward_unfused(gy, x, scale, bias, w, p, need);
  }
  NoGradGuard ng;
  // The fused graphs read dense NHWC / KRSC buffers.
  const Tensor gd = gy.detach().contiguous(), xd = x.detach().contiguous(), sd = scale.detach().contiguous(),
               bd = bias.detach().contiguous(), wd = w.detach().contiguous();
  const ConvFusionBackwardUnfused unfused = [&](const ConvFusionNeeds& n) {
    return conv_scale_bias_relu_backward_unfused(gd, xd, sd, bd, wd, p, n);
  };
  ConvFusionBackwardChoice local;
  ConvFusionBackwardChoice* h = how ? how : &local;
  ConvBnGrads g = fused(gd, xd, sd, bd, wd, p, need, unfused, h);
  if (need.act()) {
    g_counts.dgrad.fetch_add(1, std::memory_order_relaxed);
    if (h->dgrad.fused) g_counts.dgrad_fused.fetch_add(1, std::memory_order_relaxed);
  }
  if (need.w) {
    g_counts.wgrad.fetch_add(1, std::memory_order_relaxed);
    if (h->wgrad.fused) g_counts.wgrad_fused.fetch_add(1, std::memory_order_relaxed);
  }
  // exactly what was asked for
  if (!need.x) g.dx = Tensor();
  if (!need.scale) g.dscale = Tensor();
  if (!need.bias) g.dbias = Tensor();
  if (!need.w) g.dw = Tensor();
  return g;
}

ConvBnStats conv_scale_bias_relu_stats_train(const Tensor& x, const Tensor& scale, const Tensor& bias,
                                             const Tensor& w, const Conv2dParams& p, ConvFusionChoice* how) {
  op_device(kOp, {x, scale, bias, w});  // one device (the error names the op)
  check_args(x, scale, bias, w, p);
  KILN_CHECK(x.shape()[0] > 0, kOp, ": x ", x.str(), ": training needs a non-empty batch");
  ConvBnStats r;
  {
    NoGradGuard ng;  // nothing records: the device's fused kernel may run
    r = conv_scale_bias_relu_stats(x.detach(), scale.detach(), bias.detach(), w.detach(), p, how);
  }
  if (!needs_record({x, scale, bias, w})) return r;
  const ConvFusionNeeds need{x.requires_grad(), scale.requires_grad(), bias.requires_grad(), w.requires_grad()};
  Tensor y = record("conv_scale_bias_relu", {x, scale, bias, w}, r.y,
                    [need, p, xd = x.detach(), sd = scale.detach(), bd = bias.detach(), wd = w.detach()](const Tensor& gy) {
                      NoGradGuard ng;
                      const ConvBnGrads g = conv_scale_bias_relu_backward(gy, xd, sd, bd, wd, p, need);
                      return grads{g.dx, g.dscale, g.dbias, g.dw};
                    });
  // The statistics' gradients, folded into dy by the engine: d sum/dy = 1, d sumsq/dy = 2y, as one
  // node whose backward is one pass over y (core/ops/channel_moments.h).
  const ChannelMoments m = record_channel_moments(y, r.sum, r.sumsq);
  return {y, m.sum, m.sumsq};
}

// bn_finalize: core/ops/bn_finalize.cpp (its kernels: core/ops/bn_finalize.h).

}  // namespace kiln::ops
