// conv2d: the op (checks, one backward closure); its kernels fill the slots
// conv2d_forward and conv2d_backward (conv2d.h): oneDNN, Winograd and im2col in
// core/cpu/conv2d.cpp (the choice among them, core/cpu/conv_algo.h, lives inside the CPU kernel),
// cuDNN in core/cuda/conv2d_cuda.cu. What the forward leaves for the backward (the CPU's reordered
// weights) travels as the slots' opaque `saved` handle.
//
// Tests: tests/core/conv2d_test.cpp, tests/gpu/ops_dispatch_test.cpp. Benchmark: `kiln bench conv`,
// tools/bench/bench_ops.py.
#include "core/ops/conv2d.h"

#include <memory>

#include "core/autograd.h"
#include "core/ops/dispatch.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(conv2d_forward);
KILN_DEFINE_KERNEL_SLOT(conv2d_backward);
}  // namespace kiln

namespace kiln::ops {

namespace {

void check_args(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  KILN_CHECK(x.defined() && w.defined(), "conv2d: input and weight must be defined tensors");
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
  const Device d = op_device("conv2d", {x0, w0, b0});
  Shape ys = conv2d_output_shape(x0.shape(), w0.shape(), p);
  KILN_CHECK(!b0.defined() || b0.shape() == Shape{w0.size(0)}, "conv2d: bias ", b0.str(), " must have shape [",
             w0.size(0), "] for weight ", w0.str());
  const auto backward = conv2d_backward_kernel.get(d, "conv2d");
  const auto forward = conv2d_forward_kernel.get(d, "conv2d");
  Conv2dBackwardArgs args;
  args.x_shape = x0.shape();
  args.w_shape = w0.shape();
  args.p = p;
  args.dtype = x0.dtype();
  args.has_bias = b0.defined();
  args.need_x = x0.requires_grad();
  args.need_w = w0.requires_grad();
  args.need_b = b0.defined() && b0.requires_grad();
  const bool recording = needs_record({x0, w0, b0});
  // An empty batch: nothing for the kernels to do, and zero gradients.
  const bool empty = ys[0] == 0;
  Tensor x = x0.detach(), w = w0.detach(), b = b0.defined() ? b0.detach() : Tensor();
  Tensor y = empty ? Tensor::zeros(ys, args.dtype, d)
                   : forward(x, w, b, p, recording && args.need_x ? &args.saved : nullptr);
  if (!recording) return y;
  // Backward-data needs only w, backward-weights only x: each is kept only when its gradient is wanted.
  Tensor xs = args.need_w ? x : Tensor(), ws = args.need_x ? w : Tensor();
  return record("conv2d", {x0, w0, b0}, y,
                [backward, args = std::move(args), xs = std::move(xs), ws = std::move(ws), d, empty](const Tensor& gy) {
                  if (empty) {
                    return grads{Tensor::zeros(args.x_shape, args.dtype, d), Tensor::zeros(args.w_shape, args.dtype, d),
                                 Tensor::zeros({args.w_shape[0]}, args.dtype, d)};
                  }
                  Conv2dGrads r = backward(gy, xs, ws, args);
                  return grads{r.dx, r.dw, r.db};
                });
}

}  // namespace kiln::ops
