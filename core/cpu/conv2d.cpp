// conv2d on the CPU (the kernels of core/ops/conv2d.h's slots conv2d_forward and conv2d_backward;
// the op, with its checks and its one backward closure, is core/ops/conv2d.cpp): oneDNN forward,
// backward-data and backward-weights(+bias) primitives, created once per geometry and dtype and kept
// in the primitive cache (core/dnnl_context.h).
//
// Layouts: activations x (N, H, W, Cin) and y (N, OH, OW, Cout) are handed to oneDNN as `nhwc`
// without copies; weights (Cout, KH, KW, Cin/g) are oneDNN's `ohwi`, or `gohwi` over dims
// {g, Cout/g, Cin/g, KH, KW} with groups. The primitives pick their own weight layout (`any`, a
// blocked one such as OIhw8i8o on AVX2: with plain ohwi weights oneDNN 2.6 falls back to its
// reference kernels, ~100x slower) and the weights are reordered into it on every call, as PyTorch
// does: the weights change every step, so a reordered copy can only be reused within one step
// (forward -> backward-data, when both primitives want the same layout): the forward hands it to
// the backward as the slot's opaque `saved` handle. Weight gradients come back in the blocked
// layout and are reordered to ohwi. For large kernels on many channels the backward also runs in
// oneDNN's blocked activation layout (see ConvGeom::blocked_backward).
//
// NOTE: bf16/f16 need avx512 extensions in oneDNN 2.6, so on CPUs without them (onednn::native_compute
// is false) the kernels convert their inputs to f32, run the f32 algorithms (direct, Winograd or
// im2col, chosen as for f32) and round the results back to the input dtype. With direct the values
// equal a native low-precision conv with f32 accumulation (bf16 -> f32 is exact); Winograd in f32
// does not round its transformed tiles, so it is closer to exact than native bf16 Winograd.
//
// Each pass (forward, backward-data, backward-weights) runs the algorithm core/cpu/conv_algo.h
// chooses for the shape: oneDNN's direct kernels, kiln's Winograd F(2x2,3x3) or im2col + GEMM
// (core/cpu/winograd.h); by default measured on the first call of each shape.
//
// Tests: tests/core/conv2d_test.cpp, tests/core/conv_algo_test.cpp, tests/core/winograd_test.cpp.
// Benchmark: `kiln bench conv`, tools/bench/bench_ops.py.
#include <algorithm>
#include <memory>

#include "core/cpu/winograd.h"
#include "core/dnnl_context.h"
#include "core/ops/conv2d.h"
#include "core/cpu/conv_algo.h"
#include "core/ops/reduce.h"

namespace kiln::cpu {

using dnnl::memory;
using tag = memory::format_tag;
using ops::Conv2dParams;
namespace winograd = ops::winograd;
namespace ca = ops::conv_algo;

namespace {

// Everything a primitive depends on, with the derived output size.
struct ConvGeom {
  int64_t n, h, w, ic, oc, kh, kw, oh, ow;
  Conv2dParams p;
  DType dtype;
  bool bias;
  // conv_algo's `blocked`: the activations described as oneDNN's nChw16c / nChw8c, which for 16 / 8
  // channels are the NHWC bytes themselves (so x, y, dx and dy are wrapped, never reordered), for
  // oneDNN's blocked kernels; only where input and output channels both equal the block.
  bool blocked = false;

  memory::desc act_md(int64_t c, int64_t hh, int64_t ww) const {
    const tag t = !blocked ? tag::nhwc : c == 16 ? tag::nChw16c : tag::nChw8c;
    return {{n, c, hh, ww}, onednn::data_type(dtype), t};
  }
  memory::desc src_md() const { return act_md(ic, h, w); }
  memory::desc dst_md() const { return act_md(oc, oh, ow); }
  memory::desc bias_md() const { return {{oc}, onednn::data_type(dtype), tag::a}; }
  // The layout of kiln's weight tensors.
  memory::desc user_weights_md() const {
    if (p.groups == 1) return {{oc, ic, kh, kw}, onednn::data_type(dtype), tag::ohwi};
    return {{p.groups, oc / p.groups, ic / p.groups, kh, kw}, onednn::data_type(dtype), tag::gohwi};
  }
  memory::desc any_weights_md() const {
    memory::dims d =
        p.groups == 1 ? memory::dims{oc, ic, kh, kw} : memory::dims{p.groups, oc / p.groups, ic / p.groups, kh, kw};
    return {d, onednn::data_type(dtype), tag::any};
  }
  // Small convolutions run on one thread, primitives included (see onednn::SerialScope).
  bool serial() const {
    return 2.0 * static_cast<double>(n * oh * ow * oc) * static_cast<double>(kh * kw * (ic / p.groups)) <
           onednn::kSerialFlops;
  }
  memory::dims strides() const { return {p.stride_h, p.stride_w}; }
  memory::dims dilates() const { return {p.dilation_h - 1, p.dilation_w - 1}; }  // oneDNN counts from 0
  memory::dims pad() const { return {p.pad_h, p.pad_w}; }

  onednn::CacheKey key(const char* op) const {
    onednn::CacheKey k(op);
    k.add(Shape{n, h, w, ic, oc, kh, kw});
    k.add(Shape{p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups});
    k.add(dtype).add(bias ? 1 : 0).add(blocked ? 1 : 0);
    return k;
  }
  std::string str() const {
    return detail::cat(blocked ? "(blocked view) " : "", "x ", dtype_name(dtype), shape_str({n, h, w, ic}), ", w ",
                       shape_str({oc, kh, kw, ic / p.groups}), ", stride ", p.stride_h, "x", p.stride_w, ", pad ",
                       p.pad_h, "x", p.pad_w, ", dilation ", p.dilation_h, "x", p.dilation_w, ", groups ", p.groups);
  }

  dnnl::convolution_forward::desc fwd_desc(const memory::desc& src, const memory::desc& dst) const {
    // Right padding equals left padding: oneDNN checks the output size with the same floor division.
    if (bias)
      return {dnnl::prop_kind::forward_training,
              dnnl::algorithm::convolution_direct,
              src,
              any_weights_md(),
              bias_md(),
              dst,
              strides(),
              dilates(),
              pad(),
              pad()};
    return {dnnl::prop_kind::forward_training,
            dnnl::algorithm::convolution_direct,
            src,
            any_weights_md(),
            dst,
            strides(),
            dilates(),
            pad(),
            pad()};
  }
  dnnl::convolution_forward::primitive_desc fwd_pd() const {
    return {fwd_desc(src_md(), dst_md()), onednn::attr(), onednn::engine()};
  }

  // Backward runs in oneDNN's own activation layout (nChw8c on AVX2) for 3x3-and-larger kernels
  // with 64+ channels: the blocked backward-data and backward-weights kernels beat the NHWC ones
  // by more than the reorders of x, dy and dx cost (backward 10-20% faster, measured on the AVX2
  // dev machine for 64..256 channels). 1x1 kernels, few channels and the 3-channel stem lose
  // 25-75% that way, so they stay in NHWC.
  bool blocked_backward() const { return p.groups == 1 && kh * kw > 1 && ic >= 64 && oc >= 64; }
  memory::desc bwd_src_md() const {
    return blocked_backward() ? memory::desc({n, ic, h, w}, onednn::data_type(dtype), tag::any) : src_md();
  }
  memory::desc bwd_dst_md() const {
    return blocked_backward() ? memory::desc({n, oc, oh, ow}, onednn::data_type(dtype), tag::any) : dst_md();
  }
  // The forward descriptor backward primitives take as their hint, in the backward's layouts.
  dnnl::convolution_forward::primitive_desc bwd_hint_pd() const {
    return {fwd_desc(bwd_src_md(), bwd_dst_md()), onednn::engine()};
  }
};

using FwdPrim = onednn::CachedPrimitive<dnnl::convolution_forward>;
using BwdDataPrim = onednn::CachedPrimitive<dnnl::convolution_backward_data>;
using BwdWeightsPrim = onednn::CachedPrimitive<dnnl::convolution_backward_weights>;

template <typename P, typename F>
std::shared_ptr<const P> cached(const ConvGeom& g, const char* op, F make_pd) {
  return onednn::cache().get_or_create<P>(g.key(op), [&]() -> std::shared_ptr<const P> {
    onednn::SerialScope serial(g.serial());  // JIT kernels fix their thread count here
    try {
      return std::make_shared<const P>(make_pd());
    } catch (const dnnl::error& e) {
      KILN_FAIL("conv2d: oneDNN could not create the ", op, " primitive for ", g.str(), ": ", e.what());
    }
  });
}

std::shared_ptr<const FwdPrim> fwd_prim(const ConvGeom& g) {
  return cached<FwdPrim>(g, "conv_fwd", [&] { return g.fwd_pd(); });
}

std::shared_ptr<const BwdDataPrim> bwd_data_prim(const ConvGeom& g) {
  return cached<BwdDataPrim>(g, "conv_bwd_data", [&] {
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, g.bwd_src_md(), g.any_weights_md(),
                                            g.bwd_dst_md(), g.strides(), g.dilates(), g.pad(), g.pad());
    return dnnl::convolution_backward_data::primitive_desc(d, onednn::attr(), onednn::engine(), g.bwd_hint_pd());
  });
}

std::shared_ptr<const BwdWeightsPrim> bwd_weights_prim(const ConvGeom& g) {
  return cached<BwdWeightsPrim>(g, "conv_bwd_weights", [&] {
    auto d = g.bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, g.bwd_src_md(),
                                                               g.any_weights_md(), g.bias_md(), g.bwd_dst_md(),
                                                               g.strides(), g.dilates(), g.pad(), g.pad())
                    : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, g.bwd_src_md(),
                                                               g.any_weights_md(), g.bwd_dst_md(), g.strides(),
                                                               g.dilates(), g.pad(), g.pad());
    return dnnl::convolution_backward_weights::primitive_desc(d, onednn::attr(), onednn::engine(), g.bwd_hint_pd());
  });
}

// conv_algo's `blocked` for `g`: the same convolution on the blocked view of its activations.
ConvGeom blocked_view(ConvGeom g) {
  g.blocked = true;
  return g;
}

// Whether oneDNN runs `pass` of the blocked view `gv` on one of its optimised kernels. A layout its
// blocked kernels do not take (nChw16c on an AVX2 CPU) goes to its reference implementation, which
// takes seconds where direct takes milliseconds: no candidate then.
bool blocked_view_runs(const ConvGeom& gv, ca::Pass pass) {
  try {
    const char* impl = pass == ca::Pass::forward         ? fwd_prim(gv)->pd.impl_info_str()
                       : pass == ca::Pass::backward_data ? bwd_data_prim(gv)->pd.impl_info_str()
                                                         : bwd_weights_prim(gv)->pd.impl_info_str();
    return std::string(impl).rfind("ref", 0) != 0;
  } catch (const Error&) {
    return false;
  }
}

// Whether `pass` of `g` (key `key`) offers conv_algo's `blocked` candidate: only a measured choice
// can take it (the static rule and the forced modes never do), so the view's primitive is not even
// made for the shapes that are not measured.
bool offer_blocked(const ConvGeom& gv, const ca::ConvKey& key, ca::Pass pass, bool native) {
  return native && ca::mode() == ca::Mode::automatic && key.flops() >= ca::kMinMeasureFlops &&
         blocked_view_runs(gv, pass);
}

// Forward in a natively supported dtype. `wr` receives the weights in the forward primitive's
// layout, for reuse by backward-data.
Tensor forward_native(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor& b, onednn::Reordered* wr) {
  onednn::SerialScope serial(g.serial());
  auto fp = fwd_prim(g);
  onednn::Reordered wk = onednn::reorder_to(onednn::wrap(g.user_weights_md(), w), w, fp->pd.weights_desc());
  Tensor y = Tensor::empty({g.n, g.oh, g.ow, g.oc}, g.dtype);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, onednn::wrap(g.src_md(), x)},
                                       {DNNL_ARG_WEIGHTS, wk.mem},
                                       {DNNL_ARG_DST, onednn::wrap(g.dst_md(), y)}};
  if (g.bias) args.emplace(DNNL_ARG_BIAS, onednn::wrap(g.bias_md(), b));
  onednn::execute(fp->prim, fp->pd, std::move(args));
  if (wr) *wr = std::move(wk);
  return y;
}

struct ConvGrads {
  Tensor gx, gw, gb;
};

// Backward in a natively supported dtype: dx when need_x, dw (and db when g.bias) when need_w.
// `fwd_w`: the forward's reordered weights, used again when backward-data wants the same layout.
ConvGrads backward_native(const ConvGeom& g, const Tensor& gy, const Tensor& x, const Tensor& w,
                          const onednn::Reordered* fwd_w, bool need_x, bool need_w) {
  onednn::SerialScope serial(g.serial());
  ConvGrads out;
  onednn::Reordered dy;  // dy in the layout of the first primitive that reads it; shared when the other agrees
  auto dy_as = [&](const memory::desc& want) {
    if (!dy.mem || dy.mem.get_desc() != want) dy = onednn::reorder_to(onednn::wrap(g.dst_md(), gy), gy, want);
    return dy.mem;
  };
  if (need_w) {
    auto bp = bwd_weights_prim(g);
    out.gw = Tensor::empty({g.oc, g.kh, g.kw, g.ic / g.p.groups}, g.dtype);
    onednn::OutputMemory dw(bp->pd.diff_weights_desc(), g.user_weights_md(), out.gw);
    onednn::Reordered xs = onednn::reorder_to(onednn::wrap(g.src_md(), x), x, bp->pd.src_desc());
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, xs.mem}, {DNNL_ARG_DIFF_DST, dy_as(bp->pd.diff_dst_desc())}, {DNNL_ARG_DIFF_WEIGHTS, dw.mem()}};
    if (g.bias) {
      out.gb = Tensor::empty({g.oc}, g.dtype);
      args.emplace(DNNL_ARG_DIFF_BIAS, onednn::wrap(g.bias_md(), out.gb));
    }
    onednn::execute(bp->prim, bp->pd, std::move(args));
    dw.finish();
  }
  if (need_x) {
    auto bp = bwd_data_prim(g);
    memory::desc want = bp->pd.weights_desc();
    onednn::Reordered wk = fwd_w && fwd_w->mem && fwd_w->mem.get_desc() == want
                               ? *fwd_w
                               : onednn::reorder_to(onednn::wrap(g.user_weights_md(), w), w, want);
    out.gx = Tensor::empty({g.n, g.h, g.w, g.ic}, g.dtype);
    onednn::OutputMemory dx(bp->pd.diff_src_desc(), g.src_md(), out.gx);
    onednn::execute(bp->prim, bp->pd,
                    {{DNNL_ARG_DIFF_DST, dy_as(bp->pd.diff_dst_desc())},
                     {DNNL_ARG_WEIGHTS, wk.mem},
                     {DNNL_ARG_DIFF_SRC, dx.mem()}});
    dx.finish();
  }
  return out;
}

Tensor to_dtype(const Tensor& t, DType d) { return t.defined() && t.dtype() != d ? t.to(d) : t; }

// The geometry of x (n, h, w, ic) and w (oc, kh, kw, ic/groups) in compute dtype ct.
ConvGeom geometry(const Shape& xs, const Shape& ws, const Conv2dParams& p, DType ct, bool bias) {
  const Shape ys = ops::conv2d_output_shape(xs, ws, p);
  return {xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], ys[1], ys[2], p, ct, bias};
}

// The key of conv_algo's choices (core/cpu/conv_algo.h).
ca::ConvKey algo_key(const ConvGeom& g) {
  const Conv2dParams& p = g.p;
  return {g.n,       g.h,       g.w,     g.ic,    g.oc,         g.kh,         g.kw,     p.stride_h,
          p.stride_w, p.pad_h,  p.pad_w, p.dilation_h, p.dilation_w, p.groups, g.dtype, g.bias};
}

// The static rules of the heuristic mode: Winograd for the shapes it wins (all passes), the im2col
// GEMM for strided 3x3 weight gradients.
bool winograd_rule(const ConvGeom& g, bool native) {
  const Conv2dParams& p = g.p;
  return native &&
         winograd::applicable(g.kh, g.kw, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w,
                              p.groups, g.bias, g.dtype) &&
         winograd::chosen(g.ic, g.oc, g.dtype);
}
bool im2col_rule(const ConvGeom& g, bool native) {
  const Conv2dParams& p = g.p;
  return native && !g.bias &&
         winograd::im2col_chosen(g.kh, g.kw, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w,
                                 p.groups, g.ic, g.oc, g.dtype);
}

// NOTE: oneDNN 2.6's jit_1x1 kernel writes past its reduce-to-unit-stride workspace in the
// weight-gradient pass of a strided 1x1 convolution with fewer than 8 input channels (oneDNN
// issue 6035; wrong gradients and heap corruption). Such a convolution is the stride-1 one on
// the subsampled input, which takes another kernel: both kernels below subsample and go.
bool strided_1x1_few_channels(const Shape& xs, const Shape& ws, const Conv2dParams& p) {
  return ws[1] == 1 && ws[2] == 1 && p.pad_h == 0 && p.pad_w == 0 && (p.stride_h > 1 || p.stride_w > 1) && xs[3] < 8;
}
Tensor subsample(const Tensor& x, const Conv2dParams& p) {
  return x.slice(1, 0, x.size(1), p.stride_h).slice(2, 0, x.size(2), p.stride_w).contiguous();
}
Conv2dParams unit_stride(Conv2dParams p) {
  p.stride_h = p.stride_w = 1;
  p.dilation_h = p.dilation_w = 1;
  return p;
}

// The backward passes with the algorithms chosen for them (bd: backward-data, bw: backward-weights),
// in the compute dtype. The direct passes run together (they share dy's reorder), and so do the
// blocked ones; the bias gradient comes with the direct or blocked weight gradient, else as dy
// summed over N, H, W.
ConvGrads run_backward(const ConvGeom& g, const ConvGeom& gv, const Tensor& gy, const Tensor& xc, const Tensor& wc,
                       const Conv2dBackwardArgs& a, ca::Algo bd, ca::Algo bw) {
  const Conv2dParams& p = a.p;
  const bool direct_x = a.need_x && bd == ca::Algo::direct;
  const bool direct_w = a.need_w && bw == ca::Algo::direct;
  const bool blocked_x = a.need_x && bd == ca::Algo::blocked;
  const bool blocked_w = a.need_w && bw == ca::Algo::blocked;
  const auto* fwd_w = static_cast<const onednn::Reordered*>(a.saved.get());
  ConvGrads r;
  if (direct_x || direct_w) r = backward_native(g, gy, xc, wc, fwd_w, direct_x, direct_w);
  if (blocked_x || blocked_w) {
    ConvGrads rb = backward_native(gv, gy, xc, wc, fwd_w, blocked_x, blocked_w);
    if (blocked_x) r.gx = rb.gx;
    if (blocked_w) r.gw = rb.gw, r.gb = rb.gb;
  }
  if (a.need_x && bd == ca::Algo::winograd) r.gx = winograd::backward_data(gy, wc);
  if (a.need_x && bd == ca::Algo::im2col)
    r.gx = winograd::im2col_backward_data(gy, wc, a.x_shape, p.stride_h, p.stride_w, p.pad_h, p.pad_w);
  if (a.need_w && bw == ca::Algo::winograd) r.gw = winograd::backward_weights(gy, xc);
  if (a.need_w && bw == ca::Algo::im2col) r.gw = winograd::im2col_backward_weights(gy, xc, p.stride_h, p.pad_h);
  if (a.need_b && !direct_w && !blocked_w) r.gb = ops::sum(gy, {0, 1, 2});
  return r;
}

}  // namespace

Tensor conv2d_forward(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Conv2dParams& p,
                      std::shared_ptr<void>* saved) {
  if (strided_1x1_few_channels(x0.shape(), w0.shape(), p))
    return conv2d_forward(subsample(x0, p), w0, b0, unit_stride(p), saved);
  const DType dt = x0.dtype();
  const bool native = onednn::native_compute(dt);
  const DType ct = native ? dt : DType::f32;
  const ConvGeom g = geometry(x0.shape(), w0.shape(), p, ct, b0.defined());
  Tensor x = x0.contiguous(), w = w0.contiguous();
  Tensor b = b0.defined() ? b0.contiguous() : Tensor();

  // The forward's algorithm (core/cpu/conv_algo.h): measured on these operands (in the compute
  // dtype: bf16/f16 without native kernels convert to f32 first) the first time the shape is seen,
  // or the static rule / a forced one.
  const ca::ConvKey key = algo_key(g);
  const Tensor xc = to_dtype(x, ct), wc = to_dtype(w, ct), bc = to_dtype(b, ct);
  const ConvGeom gv = blocked_view(g);
  std::vector<ca::Candidate> candidates{{ca::Algo::direct, {}}};
  auto im2col = [&] { return winograd::im2col_forward(xc, wc, p.stride_h, p.stride_w, p.pad_h, p.pad_w); };
  for (ca::Algo alg : ca::applicable(key, ca::Pass::forward)) {
    if (alg == ca::Algo::winograd) candidates.push_back({alg, [&] { (void)winograd::forward(xc, wc, bc); }});
    if (alg == ca::Algo::im2col) candidates.push_back({alg, [&] { (void)im2col(); }});
    if (alg == ca::Algo::blocked && offer_blocked(gv, key, ca::Pass::forward, native))
      candidates.push_back({alg, [&] { (void)forward_native(gv, xc, wc, bc, nullptr); }});
  }
  if (candidates.size() > 1) candidates[0].run = [&] { (void)forward_native(g, xc, wc, bc, nullptr); };
  const ca::Algo fwd_algo =
      ca::choose(key, ca::Pass::forward, candidates, winograd_rule(g, native) ? ca::Algo::winograd : ca::Algo::direct);
  if (fwd_algo == ca::Algo::winograd) return to_dtype(winograd::forward(xc, wc, bc), dt);
  if (fwd_algo == ca::Algo::im2col) return to_dtype(im2col(), dt);
  const ConvGeom& gd = fwd_algo == ca::Algo::blocked ? gv : g;

  // Keep the forward's reordered weights for backward-data only when it wants the same layout
  // (not the case for the AVX2 kernels); otherwise holding them would just cost memory.
  std::shared_ptr<onednn::Reordered> wr;
  if (saved && native && bwd_data_prim(gd)->pd.weights_desc() == fwd_prim(gd)->pd.weights_desc())
    wr = std::make_shared<onednn::Reordered>();
  Tensor y = forward_native(gd, xc, wc, bc, wr.get());
  if (wr) *saved = std::move(wr);
  return to_dtype(y, dt);
}

Conv2dGrads conv2d_backward(const Tensor& gy0, const Tensor& x0, const Tensor& w0, const Conv2dBackwardArgs& a) {
  const Conv2dParams& p = a.p;
  if (strided_1x1_few_channels(a.x_shape, a.w_shape, p)) {  // see conv2d_forward
    Conv2dBackwardArgs u = a;
    u.p = unit_stride(p);
    u.x_shape = {a.x_shape[0], (a.x_shape[1] - 1) / p.stride_h + 1, (a.x_shape[2] - 1) / p.stride_w + 1, a.x_shape[3]};
    Conv2dGrads r = conv2d_backward(gy0, x0.defined() ? subsample(x0, p) : Tensor(), w0, u);
    if (r.dx.defined()) {  // the subsampled input's gradient, zeros between
      Tensor dx = Tensor::zeros(a.x_shape, r.dx.dtype());
      dx.slice(1, 0, a.x_shape[1], p.stride_h).slice(2, 0, a.x_shape[2], p.stride_w).copy_(r.dx);
      r.dx = dx;
    }
    return r;
  }
  const DType dt = a.dtype;
  const bool native = onednn::native_compute(dt);
  const ConvGeom g = geometry(a.x_shape, a.w_shape, p, native ? dt : DType::f32, a.has_bias);
  const ca::ConvKey key = algo_key(g);
  const bool wino_rule = winograd_rule(g, native);
  const ca::Algo bw_rule = wino_rule                ? ca::Algo::winograd
                           : im2col_rule(g, native) ? ca::Algo::im2col
                                                    : ca::Algo::direct;
  // x and w are saved in the caller's dtype (half the memory for bf16); converted here if needed.
  Tensor gy = to_dtype(gy0, g.dtype).contiguous();
  Tensor xc = x0.defined() ? to_dtype(x0, g.dtype).contiguous() : Tensor();
  Tensor wc = w0.defined() ? to_dtype(w0, g.dtype).contiguous() : Tensor();
  const ConvGeom gv = blocked_view(g);
  auto candidates = [&](ca::Pass pass, auto direct, auto wino, auto gemm, auto blocked) {
    std::vector<ca::Candidate> c{{ca::Algo::direct, direct}};
    for (ca::Algo alg : ca::applicable(key, pass)) {
      if (alg == ca::Algo::winograd) c.push_back({alg, wino});
      if (alg == ca::Algo::im2col) c.push_back({alg, gemm});
      if (alg == ca::Algo::blocked && offer_blocked(gv, key, pass, native)) c.push_back({alg, blocked});
    }
    return c;
  };
  const ca::Algo bd =
      !a.need_x ? ca::Algo::direct
                : ca::choose(key, ca::Pass::backward_data,
                             candidates(
                                 ca::Pass::backward_data,
                                 [&] { (void)backward_native(g, gy, xc, wc, nullptr, true, false); },
                                 [&] { (void)winograd::backward_data(gy, wc); },
                                 [&] {
                                   (void)winograd::im2col_backward_data(gy, wc, a.x_shape, p.stride_h, p.stride_w,
                                                                        p.pad_h, p.pad_w);
                                 },
                                 [&] { (void)backward_native(gv, gy, xc, wc, nullptr, true, false); }),
                             wino_rule ? ca::Algo::winograd : ca::Algo::direct);
  const ca::Algo bw =
      !a.need_w ? ca::Algo::direct
                : ca::choose(key, ca::Pass::backward_weights,
                             candidates(
                                 ca::Pass::backward_weights,
                                 [&] { (void)backward_native(g, gy, xc, wc, nullptr, false, true); },
                                 [&] { (void)winograd::backward_weights(gy, xc); },
                                 [&] { (void)winograd::im2col_backward_weights(gy, xc, p.stride_h, p.pad_h); },
                                 [&] { (void)backward_native(gv, gy, xc, wc, nullptr, false, true); }),
                             bw_rule);
  ConvGrads r = run_backward(g, gv, gy, xc, wc, a, bd, bw);
  Conv2dGrads out;
  if (a.need_x) out.dx = to_dtype(r.gx, dt);
  if (a.need_w) out.dw = to_dtype(r.gw, dt);
  if (a.need_b) out.db = to_dtype(r.gb, dt);
  return out;
}

}  // namespace kiln::cpu
