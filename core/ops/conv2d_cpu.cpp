// conv2d on the CPU: oneDNN forward, backward-data and backward-weights(+bias) primitives, created once
// per geometry and dtype and kept in the primitive cache (core/dnnl_context.h).
//
// Layouts: activations x (N, H, W, Cin) and y (N, OH, OW, Cout) are handed to oneDNN as `nhwc`
// without copies; weights (Cout, KH, KW, Cin/g) are oneDNN's `ohwi`, or `gohwi` over dims
// {g, Cout/g, Cin/g, KH, KW} with groups. The primitives pick their own weight layout (`any`, a
// blocked one such as OIhw8i8o on AVX2, which is what makes the JIT kernels usable) and the weights
// are reordered into it on every call, as PyTorch does: the weights change every step, so a
// reordered copy can only be reused within one step (forward -> backward-data, when both primitives
// want the same layout). Weight gradients come back in the blocked layout and are reordered to ohwi.
//
// NOTE: bf16/f16 need avx512 extensions in oneDNN 2.6, so on CPUs without them (dnnl_native_compute
// is false) the op converts its inputs to f32, runs the f32 primitives and rounds the results back
// to the input dtype. The values equal a native low-precision conv with f32 accumulation (bf16 -> f32
// is exact); only the speed differs.
//
// Tests: tests/core/conv2d_test.cpp. Benchmark: `kiln bench conv`, tools/bench/bench_ops.py.
#include "core/ops/conv2d.h"

#include "core/autograd.h"
#include "core/dnnl_context.h"

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

  memory::desc src_md() const { return {{n, ic, h, w}, dnnl_dtype(dtype), tag::nhwc}; }
  memory::desc dst_md() const { return {{n, oc, oh, ow}, dnnl_dtype(dtype), tag::nhwc}; }
  memory::desc bias_md() const { return {{oc}, dnnl_dtype(dtype), tag::a}; }
  // The layout of kiln's weight tensors.
  memory::desc user_weights_md() const {
    if (p.groups == 1) return {{oc, ic, kh, kw}, dnnl_dtype(dtype), tag::ohwi};
    return {{p.groups, oc / p.groups, ic / p.groups, kh, kw}, dnnl_dtype(dtype), tag::gohwi};
  }
  memory::desc any_weights_md() const {
    memory::dims d = p.groups == 1 ? memory::dims{oc, ic, kh, kw}
                                   : memory::dims{p.groups, oc / p.groups, ic / p.groups, kh, kw};
    return {d, dnnl_dtype(dtype), tag::any};
  }
  memory::dims strides() const { return {p.stride_h, p.stride_w}; }
  memory::dims dilates() const { return {p.dilation_h - 1, p.dilation_w - 1}; }  // oneDNN counts from 0
  memory::dims pad() const { return {p.pad_h, p.pad_w}; }

  CacheKey key(const char* op) const {
    CacheKey k(op);
    k.add(Shape{n, h, w, ic, oc, kh, kw});
    k.add(Shape{p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups});
    k.add(dtype).add(bias ? 1 : 0);
    return k;
  }
  std::string str() const {
    return detail::cat("x ", dtype_name(dtype), shape_str({n, h, w, ic}), ", w ", shape_str({oc, kh, kw, ic / p.groups}),
                       ", stride ", p.stride_h, "x", p.stride_w, ", pad ", p.pad_h, "x", p.pad_w, ", dilation ",
                       p.dilation_h, "x", p.dilation_w, ", groups ", p.groups);
  }

  dnnl::convolution_forward::desc fwd_desc() const {
    // Right padding equals left padding: oneDNN checks the output size with the same floor division.
    if (bias)
      return {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_md(), any_weights_md(),
              bias_md(), dst_md(), strides(), dilates(), pad(), pad()};
    return {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_md(), any_weights_md(),
            dst_md(), strides(), dilates(), pad(), pad()};
  }
  dnnl::convolution_forward::primitive_desc fwd_pd() const { return {fwd_desc(), dnnl_engine()}; }
};

using FwdPrim = CachedPrimitive<dnnl::convolution_forward>;
using BwdDataPrim = CachedPrimitive<dnnl::convolution_backward_data>;
using BwdWeightsPrim = CachedPrimitive<dnnl::convolution_backward_weights>;

template <typename P, typename F>
std::shared_ptr<const P> cached(const ConvGeom& g, const char* op, F make_pd) {
  return dnnl_cache().get_or_create<P>(g.key(op), [&]() -> std::shared_ptr<const P> {
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
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, g.src_md(), g.any_weights_md(),
                                            g.dst_md(), g.strides(), g.dilates(), g.pad(), g.pad());
    return dnnl::convolution_backward_data::primitive_desc(d, dnnl_engine(), g.fwd_pd());
  });
}

std::shared_ptr<const BwdWeightsPrim> bwd_weights_prim(const ConvGeom& g) {
  return cached<BwdWeightsPrim>(g, "conv_bwd_weights", [&] {
    auto d = g.bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, g.src_md(),
                                                               g.any_weights_md(), g.bias_md(), g.dst_md(), g.strides(),
                                                               g.dilates(), g.pad(), g.pad())
                    : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, g.src_md(),
                                                               g.any_weights_md(), g.dst_md(), g.strides(),
                                                               g.dilates(), g.pad(), g.pad());
    return dnnl::convolution_backward_weights::primitive_desc(d, dnnl_engine(), g.fwd_pd());
  });
}

// Forward in a natively supported dtype. `wr` receives the weights in the forward primitive's
// layout, for reuse by backward-data.
Tensor forward_native(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor& b, Reordered* wr) {
  auto fp = fwd_prim(g);
  Reordered wk = dnnl_reorder_to(dnnl_memory(g.user_weights_md(), w), w, fp->pd.weights_desc());
  Tensor y = Tensor::empty({g.n, g.oh, g.ow, g.oc}, g.dtype);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, dnnl_memory(g.src_md(), x)},
                                       {DNNL_ARG_WEIGHTS, wk.mem},
                                       {DNNL_ARG_DST, dnnl_memory(g.dst_md(), y)}};
  if (g.bias) args.emplace(DNNL_ARG_BIAS, dnnl_memory(g.bias_md(), b));
  dnnl_execute(fp->prim, fp->pd, std::move(args));
  if (wr) *wr = std::move(wk);
  return y;
}

Tensor backward_data_native(const ConvGeom& g, const Tensor& gy, const Tensor& w, const Reordered* fwd_w) {
  auto bp = bwd_data_prim(g);
  memory::desc want = bp->pd.weights_desc();
  Reordered wk = fwd_w && fwd_w->mem && fwd_w->mem.get_desc() == want
                     ? *fwd_w
                     : dnnl_reorder_to(dnnl_memory(g.user_weights_md(), w), w, want);
  Tensor gx = Tensor::empty({g.n, g.h, g.w, g.ic}, g.dtype);
  dnnl_execute(bp->prim, bp->pd,
               {{DNNL_ARG_DIFF_DST, dnnl_memory(g.dst_md(), gy)},
                {DNNL_ARG_WEIGHTS, wk.mem},
                {DNNL_ARG_DIFF_SRC, dnnl_memory(g.src_md(), gx)}});
  return gx;
}

// Weight gradient in kiln's layout (Cout, KH, KW, Cin/g), and the bias gradient when g.bias.
std::pair<Tensor, Tensor> backward_weights_native(const ConvGeom& g, const Tensor& gy, const Tensor& x) {
  auto bp = bwd_weights_prim(g);
  Tensor gw = Tensor::empty({g.oc, g.kh, g.kw, g.ic / g.p.groups}, g.dtype);
  memory::desc got = bp->pd.diff_weights_desc();
  memory::desc user = g.user_weights_md();
  Tensor tmp;
  memory dw;
  if (got == user) {
    dw = dnnl_memory(user, gw);
  } else {
    tmp = Tensor::empty({static_cast<int64_t>(got.get_size())}, DType::u8);
    dw = dnnl_memory(got, tmp);
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, dnnl_memory(g.src_md(), x)},
                                       {DNNL_ARG_DIFF_DST, dnnl_memory(g.dst_md(), gy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, dw}};
  Tensor gb;
  if (g.bias) {
    gb = Tensor::empty({g.oc}, g.dtype);
    args.emplace(DNNL_ARG_DIFF_BIAS, dnnl_memory(g.bias_md(), gb));
  }
  dnnl_execute(bp->prim, bp->pd, std::move(args));
  if (tmp.defined()) dnnl_reorder_into(dw, user, gw);
  return {gw, gb};
}

Tensor to_dtype(const Tensor& t, DType d) { return t.defined() && t.dtype() != d ? t.to(d) : t; }

void check_args(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  KILN_CHECK(x.defined() && w.defined(), "conv2d: input and weight must be defined tensors");
  for (const Tensor* t : {&x, &w, &b}) {
    if (!t->defined()) continue;
    KILN_CHECK(t->device().is_cpu(), "conv2d: tensor ", t->str(), " is on ", t->device().str(),
               ", and this build has no CUDA kernel for it");
  }
  DType dt = x.dtype();
  KILN_CHECK(dt == DType::f32 || dt == DType::bf16 || dt == DType::f16, "conv2d: input ", x.str(),
             ": accepted dtypes are f32, bf16 and f16");
  KILN_CHECK(w.dtype() == dt, "conv2d: weight ", w.str(), " and input ", x.str(), " must have the same dtype");
  KILN_CHECK(!b.defined() || b.dtype() == dt, "conv2d: bias ", b.str(), " and input ", x.str(),
             " must have the same dtype");
}

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
             " channels and weight ", shape_str(w), " has ", cout, " output channels; both must divide by groups=",
             p.groups);
  KILN_CHECK(w[3] == cin / p.groups, "conv2d: weight ", shape_str(w), " expects ", w[3] * p.groups,
             " input channels (Cin/groups = ", w[3], ", groups=", p.groups, ") but input ", shape_str(x), " has ", cin);
  int64_t eff_h = p.dilation_h * (w[1] - 1) + 1, eff_w = p.dilation_w * (w[2] - 1) + 1;
  int64_t ih = x[1] + 2 * p.pad_h, iw = x[2] + 2 * p.pad_w;
  KILN_CHECK(w[1] >= 1 && w[2] >= 1 && ih >= eff_h && iw >= eff_w, "conv2d: kernel ", w[1], "x", w[2],
             " (dilated ", eff_h, "x", eff_w, ") does not fit input ", shape_str(x), " padded by ", p.pad_h, "x", p.pad_w);
  return {x[0], (ih - eff_h) / p.stride_h + 1, (iw - eff_w) / p.stride_w + 1, cout};
}

Tensor conv2d(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Conv2dParams& p) {
  check_args(x0, w0, b0, p);
  Shape ys = conv2d_output_shape(x0.shape(), w0.shape(), p);
  KILN_CHECK(!b0.defined() || b0.shape() == Shape{w0.size(0)}, "conv2d: bias ", b0.str(), " must have shape [",
             w0.size(0), "] for weight ", w0.str());
  DType dt = x0.dtype();
  bool native = dnnl_native_compute(dt);
  DType ct = native ? dt : DType::f32;
  ConvGeom g{x0.size(0), x0.size(1), x0.size(2), x0.size(3), w0.size(0), w0.size(1), w0.size(2),
             ys[1],      ys[2],      p,          ct,         b0.defined()};
  Tensor x = x0.detach().contiguous(), w = w0.detach().contiguous();
  Tensor b = b0.defined() ? b0.detach().contiguous() : Tensor();
  if (ys[0] == 0) {  // an empty batch: nothing for oneDNN to do, and zero gradients
    return record("conv2d", {x0, w0, b0}, Tensor::zeros(ys, dt), [xs = x.shape(), ws = w.shape(), dt](const Tensor&) {
      return grads{Tensor::zeros(xs, dt), Tensor::zeros(ws, dt), Tensor::zeros({ws[0]}, dt)};
    });
  }

  bool need_x = x0.requires_grad(), need_w = w0.requires_grad(), need_b = b0.defined() && b0.requires_grad();
  bool recording = needs_record({x0, w0, b0});
  auto wr = std::make_shared<Reordered>();
  Tensor y = forward_native(g, to_dtype(x, ct), to_dtype(w, ct), to_dtype(b, ct),
                            recording && need_x && native ? wr.get() : nullptr);
  y = to_dtype(y, dt);
  if (!recording) return y;
  // Saved in the caller's dtype (half the memory for bf16); converted again in backward if needed.
  return record("conv2d", {x0, w0, b0}, y, [g, x, w, wr, dt, need_x, need_w, need_b](const Tensor& gy0) {
    Tensor gy = to_dtype(gy0, g.dtype).contiguous();
    Tensor gx, gw, gb;
    if (need_x) gx = to_dtype(backward_data_native(g, gy, to_dtype(w, g.dtype), wr.get()), dt);
    if (need_w || need_b) {
      auto [dw, db] = backward_weights_native(g, gy, to_dtype(x, g.dtype));
      if (need_w) gw = to_dtype(dw, dt);
      if (need_b) gb = to_dtype(db, dt);
    }
    return grads{gx, gw, gb};
  });
}

}  // namespace kiln::ops
