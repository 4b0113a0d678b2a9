// conv2d on the CPU: oneDNN forward, backward-data and backward-weights(+bias) primitives, created once
// per geometry and dtype and kept in the primitive cache (core/dnnl_context.h).
//
// Layouts: activations x (N, H, W, Cin) and y (N, OH, OW, Cout) are handed to oneDNN as `nhwc`
// without copies; weights (Cout, KH, KW, Cin/g) are oneDNN's `ohwi`, or `gohwi` over dims
// {g, Cout/g, Cin/g, KH, KW} with groups. The primitives pick their own weight layout (`any`, a
// blocked one such as OIhw8i8o on AVX2: with plain ohwi weights oneDNN 2.6 falls back to its
// reference kernels, ~100x slower) and the weights are reordered into it on every call, as PyTorch
// does: the weights change every step, so a reordered copy can only be reused within one step
// (forward -> backward-data, when both primitives want the same layout). Weight gradients come
// back in the blocked layout and are reordered to ohwi. For large kernels on many channels the
// backward also runs in oneDNN's blocked activation layout (see ConvGeom::blocked_backward).
//
// NOTE: bf16/f16 need avx512 extensions in oneDNN 2.6, so on CPUs without them (onednn::native_compute
// is false) the op converts its inputs to f32, runs the f32 primitives and rounds the results back
// to the input dtype. The values equal a native low-precision conv with f32 accumulation (bf16 -> f32
// is exact); only the speed differs.
//
// Each pass (forward, backward-data, backward-weights) runs the algorithm core/ops/conv_algo.h
// chooses for the shape: oneDNN's direct kernels, kiln's Winograd F(2x2,3x3) or the im2col weight
// gradient (core/cpu/winograd.h); by default measured on the first call of each shape.
//
// CUDA tensors take cuDNN's forward, backward-data and backward-filter (core/cuda/conv2d_cuda.cu);
// the dispatch and its autograd closure are conv2d_cuda() below (core/ops/dispatch.h).
//
// Tests: tests/core/conv2d_test.cpp, tests/gpu/ops_dispatch_test.cpp. Benchmark: `kiln bench conv`,
// tools/bench/bench_ops.py.
#include "core/ops/conv2d.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/cpu/winograd.h"
#include "core/dnnl_context.h"
#include "core/ops/conv_algo.h"
#include "core/ops/dispatch.h"
#include "core/ops/reduce.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

namespace kiln::ops {

using dnnl::memory;
using tag = memory::format_tag;

namespace {

// Everything a primitive depends on, with the derived output size.
struct ConvGeom {
  int64_t n, h, w, ic, oc, kh, kw, oh, ow;
  Conv2dParams p;
  DType dtype;
  bool bias;

  memory::desc src_md() const { return {{n, ic, h, w}, onednn::data_type(dtype), tag::nhwc}; }
  memory::desc dst_md() const { return {{n, oc, oh, ow}, onednn::data_type(dtype), tag::nhwc}; }
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
    k.add(dtype).add(bias ? 1 : 0);
    return k;
  }
  std::string str() const {
    return detail::cat("x ", dtype_name(dtype), shape_str({n, h, w, ic}), ", w ",
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

void check_args(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  KILN_CHECK(x.defined() && w.defined(), "conv2d: input and weight must be defined tensors");
  DType dt = x.dtype();
  KILN_CHECK(dt == DType::f32 || dt == DType::bf16 || dt == DType::f16, "conv2d: input ", x.str(),
             ": accepted dtypes are f32, bf16 and f16");
  KILN_CHECK(w.dtype() == dt, "conv2d: weight ", w.str(), " and input ", x.str(), " must have the same dtype");
  KILN_CHECK(!b.defined() || b.dtype() == dt, "conv2d: bias ", b.str(), " and input ", x.str(),
             " must have the same dtype");
}

#ifdef KILN_WITH_CUDA
// The CUDA op: cuDNN forward; backward-data needs only w, backward-filter only x, so each is kept
// only when its gradient is wanted. The bias gradient is gy summed over (N, OH, OW).
Tensor conv2d_cuda(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Conv2dParams& p) {
  Tensor x = x0.detach(), w = w0.detach(), b = b0.defined() ? b0.detach() : Tensor();
  Tensor y = cuda::conv2d_forward(x, w, b, p);
  if (!needs_record({x0, w0, b0})) return y;
  bool need_x = x0.requires_grad(), need_w = w0.requires_grad(), need_b = b0.defined() && b0.requires_grad();
  DType dt = x0.dtype();
  return record("conv2d", {x0, w0, b0}, y,
                [xs = need_w ? x : Tensor(), ws = need_x ? w : Tensor(), x_shape = x.shape(), w_shape = w.shape(), p,
                 dt, need_x, need_w, need_b](const Tensor& gy0) {
                  Tensor gy = gy0.dtype() == dt ? gy0 : gy0.to(dt);
                  return grads{need_x ? cuda::conv2d_backward_data(gy, ws, x_shape, p) : Tensor(),
                               need_w ? cuda::conv2d_backward_weight(gy, xs, w_shape, p) : Tensor(),
                               need_b ? cuda::sum(gy, {0, 1, 2}) : Tensor()};
                });
}
#endif

}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  KILN_CHECK(x.size() == 4, "conv2d: input must be 4-D NHWC (N, H, W, Cin), got shape ", shape_str(x));
  KILN_CHECK(w.size() == 4, "conv2d: weight must be 4-D (Cout, KH, KW, Cin/groups), got shape ", shape_str(w));
  KILN_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1 && p.pad_h >= 0 &&
                 p.pad_w >= 0 && p.groups >= 1,
             "conv2d: stride ", p.stride_h, "x", p.stride_w, ", dilation ", p.dilation_h, "x", p.dilation_w, ", pad ",
             p.pad_h, "x", p.pad_w, ", groups ", p.groups,
             ": strides, dilations and groups must be >= 1 and padding >= 0");
  int64_t cin = x[3], cout = w[0];
  KILN_CHECK(cin % p.groups == 0 && cout % p.groups == 0, "conv2d: input ", shape_str(x), " has ", cin,
             " channels and weight ", shape_str(w), " has ", cout,
             " output channels; both must divide by groups=", p.groups);
  KILN_CHECK(w[3] == cin / p.groups, "conv2d: weight ", shape_str(w), " expects ", w[3] * p.groups,
             " input channels (Cin/groups = ", w[3], ", groups=", p.groups, ") but input ", shape_str(x), " has ", cin);
  int64_t eff_h = p.dilation_h * (w[1] - 1) + 1, eff_w = p.dilation_w * (w[2] - 1) + 1;
  int64_t ih = x[1] + 2 * p.pad_h, iw = x[2] + 2 * p.pad_w;
  KILN_CHECK(w[1] >= 1 && w[2] >= 1 && ih >= eff_h && iw >= eff_w, "conv2d: kernel ", w[1], "x", w[2], " (dilated ",
             eff_h, "x", eff_w, ") does not fit input ", shape_str(x), " padded by ", p.pad_h, "x", p.pad_w);
  return {x[0], (ih - eff_h) / p.stride_h + 1, (iw - eff_w) / p.stride_w + 1, cout};
}

Tensor conv2d(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Conv2dParams& p) {
  check_args(x0, w0, b0, p);
  const bool on_gpu = op_on_cuda("conv2d", {x0, w0, b0});
  // NOTE: oneDNN 2.6's jit_1x1 kernel writes past its reduce-to-unit-stride workspace in the
  // weight-gradient pass of a strided 1x1 convolution with fewer than 8 input channels (oneDNN
  // issue 6035; wrong gradients and heap corruption). Such a convolution is the stride-1 one on
  // the subsampled input, which takes another kernel: slice (recorded, so gradients flow) and go.
  if (!on_gpu && w0.size(1) == 1 && w0.size(2) == 1 && p.pad_h == 0 && p.pad_w == 0 &&
      (p.stride_h > 1 || p.stride_w > 1) && x0.size(3) < 8) {
    Tensor xs = x0.slice(1, 0, x0.size(1), p.stride_h).slice(2, 0, x0.size(2), p.stride_w).contiguous();
    Conv2dParams unit = p;
    unit.stride_h = unit.stride_w = 1;
    unit.dilation_h = unit.dilation_w = 1;
    return conv2d(xs, w0, b0, unit);
  }
  Shape ys = conv2d_output_shape(x0.shape(), w0.shape(), p);
  KILN_CHECK(!b0.defined() || b0.shape() == Shape{w0.size(0)}, "conv2d: bias ", b0.str(), " must have shape [",
             w0.size(0), "] for weight ", w0.str());
  DType dt = x0.dtype();
  if (ys[0] == 0) {  // an empty batch: nothing for oneDNN or cuDNN to do, and zero gradients
    Device d = x0.device();
    return record("conv2d", {x0, w0, b0}, Tensor::zeros(ys, dt, d),
                  [xs = x0.shape(), ws = w0.shape(), dt, d](const Tensor&) {
                    return grads{Tensor::zeros(xs, dt, d), Tensor::zeros(ws, dt, d), Tensor::zeros({ws[0]}, dt, d)};
                  });
  }
  if (on_gpu) {
#ifdef KILN_WITH_CUDA
    return conv2d_cuda(x0, w0, b0, p);
#endif
  }
  bool native = onednn::native_compute(dt);
  DType ct = native ? dt : DType::f32;
  ConvGeom g{x0.size(0), x0.size(1), x0.size(2), x0.size(3), w0.size(0), w0.size(1),
             w0.size(2), ys[1],      ys[2],      p,          ct,         b0.defined()};
  Tensor x = x0.detach().contiguous(), w = w0.detach().contiguous();
  Tensor b = b0.defined() ? b0.detach().contiguous() : Tensor();

  bool need_x = x0.requires_grad(), need_w = w0.requires_grad(), need_b = b0.defined() && b0.requires_grad();
  bool recording = needs_record({x0, w0, b0});
  // Each pass's algorithm (core/ops/conv_algo.h): measured on these operands the first time the
  // shape is seen, or the static rule / a forced one. Without native compute only direct runs.
  namespace ca = conv_algo;
  const ca::ConvKey key{g.n,          g.h,          g.w,          g.ic,          g.oc,          g.kh,
                        g.kw,         p.stride_h,   p.stride_w,   p.pad_h,       p.pad_w,       p.dilation_h,
                        p.dilation_w, p.groups,     ct,           g.bias};
  const bool wino_rule = native &&
                         winograd::applicable(g.kh, g.kw, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h,
                                              p.dilation_w, p.groups, g.bias, ct) &&
                         winograd::chosen(g.ic, g.oc, ct);
  auto has = [&](ca::Pass pass, ca::Algo a) {
    if (!native) return false;
    auto v = ca::applicable(key, pass);
    return std::find(v.begin(), v.end(), a) != v.end();
  };
  const ca::Algo fwd_algo = ca::choose(
      key, ca::Pass::forward,
      has(ca::Pass::forward, ca::Algo::winograd)
          ? std::vector<ca::Candidate>{{ca::Algo::direct, [&] { (void)forward_native(g, x, w, b, nullptr); }},
                                       {ca::Algo::winograd, [&] { (void)winograd::forward(x, w, b); }}}
          : std::vector<ca::Candidate>{{ca::Algo::direct, {}}},
      wino_rule ? ca::Algo::winograd : ca::Algo::direct);

  // Keep the forward's reordered weights for backward-data only when it wants the same layout
  // (not the case for the AVX2 kernels); otherwise holding them would just cost memory.
  auto wr = std::make_shared<onednn::Reordered>();
  Tensor y;
  if (fwd_algo == ca::Algo::winograd) {
    y = winograd::forward(x, w, b);
  } else {
    bool keep_w =
        recording && need_x && native && bwd_data_prim(g)->pd.weights_desc() == fwd_prim(g)->pd.weights_desc();
    y = forward_native(g, to_dtype(x, ct), to_dtype(w, ct), to_dtype(b, ct), keep_w ? wr.get() : nullptr);
    y = to_dtype(y, dt);
  }
  if (!recording) return y;
  const bool gemm_rule = native && !g.bias &&
                         winograd::im2col_chosen(g.kh, g.kw, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h,
                                                 p.dilation_w, p.groups, g.ic, g.oc, ct);
  const ca::Algo bw_rule = wino_rule ? ca::Algo::winograd : gemm_rule ? ca::Algo::im2col : ca::Algo::direct;
  // Saved in the caller's dtype (half the memory for bf16); converted again in backward if needed.
  return record("conv2d", {x0, w0, b0}, y,
                [g, key, x, w, wr, dt, need_x, need_w, need_b, native, wino_rule, bw_rule](const Tensor& gy0) {
                  Tensor gy = to_dtype(gy0, g.dtype).contiguous();
                  Tensor xc = to_dtype(x, g.dtype), wc = to_dtype(w, g.dtype);
                  auto candidates = [&](ca::Pass pass, auto direct, auto wino, auto gemm) {
                    std::vector<ca::Candidate> c{{ca::Algo::direct, direct}};
                    if (!native) return c;
                    for (ca::Algo a : ca::applicable(key, pass)) {
                      if (a == ca::Algo::winograd) c.push_back({a, wino});
                      if (a == ca::Algo::im2col) c.push_back({a, gemm});
                    }
                    return c;
                  };
                  const ca::Algo bd =
                      !need_x ? ca::Algo::direct
                              : ca::choose(key, ca::Pass::backward_data,
                                           candidates(
                                               ca::Pass::backward_data,
                                               [&] { (void)backward_native(g, gy, xc, wc, nullptr, true, false); },
                                               [&] { (void)winograd::backward_data(gy, wc); }, [] {}),
                                           wino_rule ? ca::Algo::winograd : ca::Algo::direct);
                  const ca::Algo bw =
                      !need_w ? ca::Algo::direct
                              : ca::choose(key, ca::Pass::backward_weights,
                                           candidates(
                                               ca::Pass::backward_weights,
                                               [&] { (void)backward_native(g, gy, xc, wc, nullptr, false, true); },
                                               [&] { (void)winograd::backward_weights(gy, xc); },
                                               [&] { (void)winograd::im2col_backward_weights(gy, xc, g.p.stride_h,
                                                                                            g.p.pad_h); }),
                                           bw_rule);
                  // The direct passes run together (they share dy's reorder); the bias gradient comes
                  // with the direct weight gradient, else as dy summed over N, H, W.
                  const bool direct_x = need_x && bd == ca::Algo::direct;
                  const bool direct_w = (need_w && bw == ca::Algo::direct) || (need_b && !need_w);
                  ConvGrads r;
                  if (direct_x || direct_w) r = backward_native(g, gy, xc, wc, wr.get(), direct_x, direct_w);
                  if (need_x && bd == ca::Algo::winograd) r.gx = winograd::backward_data(gy, wc);
                  if (need_w && bw == ca::Algo::winograd) r.gw = winograd::backward_weights(gy, xc);
                  if (need_w && bw == ca::Algo::im2col)
                    r.gw = winograd::im2col_backward_weights(gy, xc, g.p.stride_h, g.p.pad_h);
                  if (need_b && !direct_w) r.gb = ops::sum(gy, {0, 1, 2});
                  Tensor gx = need_x ? to_dtype(r.gx, dt) : Tensor();
                  Tensor gw = need_w ? to_dtype(r.gw, dt) : Tensor();
                  Tensor gb = need_b ? to_dtype(r.gb, dt) : Tensor();
                  return grads{gx, gw, gb};
                });
}

}  // namespace kiln::ops
