// Pooling on the CPU, NHWC: own OpenMP loops, vectorised over the channels (contiguous in NHWC).
// Every pool is described per spatial axis by its windows [start, end) clipped to the input and a
// divisor factor, so max, avg (PyTorch's padding, ceil_mode and count_include_pad rules), adaptive
// and global pooling share one forward and one backward loop nest. Backward is a gather: each input
// pixel sums the outputs whose windows cover it (a contiguous range per axis, since window starts
// and ends never decrease), so threads never write the same element and dx needs no separate zero-fill pass.
// Max pooling keeps the argmax (index ih*W + iw in the input plane, i32) of the forward.
// Why not oneDNN 2.6 pooling: its avg_include_padding divides by the whole window when ceil_mode
// widens the right padding (PyTorch counts only the real padding: 1/6 vs 1/9 at a corner), and its
// nhwc jit:avx2 max pooling was slower here: (32, 56, 56, 64) k3 s2 p1, 1 thread, loaded 2-core
// machine, min of 30: fwd 23 ms / bwd 14 ms for these loops vs 89 / 77 ms for oneDNN.
// CUDA tensors: core/cuda/pool_cuda.cu (same semantics; the argmax is kept there too), with the
// autograd closures in the *_cuda() functions below; the checks are shared.
// Tests: tests/core/pool_test.cpp, tests/gpu/ops_dispatch_test.cpp.
#include "core/ops/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/nn_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

namespace kiln::ops {

namespace {

constexpr int64_t kParallelMin = 16384;  // output elements below which one thread is faster

// Windows of one spatial axis: output o reads inputs [start[o], end[o]) and divides by count[o]
// (avg pools multiply the two axes' counts). cover_lo/cover_hi[i]: outputs whose windows hold input i.
struct Axis {
  int64_t in = 0, out = 0;
  std::vector<int64_t> start, end, count, cover_lo, cover_hi;

  void finish() {
    cover_lo.assign(in, 0);
    cover_hi.assign(in, 0);
    int64_t lo = 0, hi = 0;
    for (int64_t i = 0; i < in; ++i) {
      while (lo < out && end[lo] <= i) ++lo;
      while (hi < out && start[hi] <= i) ++hi;
      cover_lo[i] = lo;
      cover_hi[i] = std::max(lo, hi);
    }
  }
};

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// PyTorch's pooling_output_shape: in ceil mode the last window must start inside the input or the
// left padding.
int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode) {
  int64_t out = floor_div(in + 2 * pad - k + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

Axis pool_axis(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode, bool count_include_pad) {
  Axis a;
  a.in = in;
  a.out = pool_out_size(in, k, s, pad, ceil_mode);
  for (int64_t o = 0; o < a.out; ++o) {
    int64_t st = o * s - pad;
    int64_t en = std::min(st + k, in + pad);  // the window may overhang the padding in ceil mode
    int64_t cst = std::max<int64_t>(st, 0), cen = std::min(en, in);
    a.start.push_back(cst);
    a.end.push_back(cen);
    a.count.push_back(count_include_pad ? en - st : cen - cst);
  }
  a.finish();
  return a;
}

// PyTorch's adaptive bins: start = floor(o*in/out), end = ceil((o+1)*in/out).
Axis adaptive_axis(int64_t in, int64_t out) {
  Axis a;
  a.in = in;
  a.out = out;
  for (int64_t o = 0; o < out; ++o) {
    int64_t st = o * in / out, en = ((o + 1) * in + out - 1) / out;
    a.start.push_back(st);
    a.end.push_back(en);
    a.count.push_back(en - st);
  }
  a.finish();
  return a;
}

struct Geom {
  int64_t N, C;
  Axis h, w;
};

// The forward loop nest: for each output pixel (offset o of its C values), start(o, oh, ow), then
// tap(o, i, pos) for each input pixel of its window (offset i, pos = ih*W + iw), then finish(o, oh, ow).
template <typename Start, typename Tap, typename Finish>
void for_each_window(const Geom& g, Start start, Tap tap, Finish finish) {
  const int64_t H = g.h.in, W = g.w.in, OH = g.h.out, OW = g.w.out, C = g.C;
#pragma omp parallel for schedule(static) if (g.N * OH * OW * C > kParallelMin)
  for (int64_t t = 0; t < g.N * OH; ++t) {
    int64_t n = t / OH, oh = t % OH;
    for (int64_t ow = 0; ow < OW; ++ow) {
      int64_t o = (t * OW + ow) * C;
      start(o, oh, ow);
      for (int64_t ih = g.h.start[oh]; ih < g.h.end[oh]; ++ih)
        for (int64_t iw = g.w.start[ow]; iw < g.w.end[ow]; ++iw)
          tap(o, ((n * H + ih) * W + iw) * C, static_cast<int32_t>(ih * W + iw));
      finish(o, oh, ow);
    }
  }
}

// The backward gather: for each input pixel (offset i of its C values in dx, zeroed first),
// tap(i, o, pos, oh, ow) for each output pixel whose window holds it (offset o, pos = ih*W + iw).
template <typename T, typename Tap>
void for_each_covering(const Geom& g, T* dx, Tap tap) {
  const int64_t H = g.h.in, W = g.w.in, OH = g.h.out, OW = g.w.out, C = g.C;
#pragma omp parallel for schedule(static) if (g.N * H * W * C > kParallelMin)
  for (int64_t t = 0; t < g.N * H; ++t) {
    int64_t n = t / H, ih = t % H;
    for (int64_t iw = 0; iw < W; ++iw) {
      int64_t i = (t * W + iw) * C;
      for (int64_t c = 0; c < C; ++c) dx[i + c] = T(0);
      for (int64_t oh = g.h.cover_lo[ih]; oh < g.h.cover_hi[ih]; ++oh)
        for (int64_t ow = g.w.cover_lo[iw]; ow < g.w.cover_hi[iw]; ++ow)
          tap(i, ((n * OH + oh) * OW + ow) * C, static_cast<int32_t>(ih * W + iw), oh, ow);
    }
  }
}

// y = max over the window; arg = ih*W + iw of the max (the first on ties; NaN wins, as in PyTorch).
template <typename T>
void max_forward(const T* x, const Geom& g, T* y, int32_t* arg) {
  const int64_t C = g.C, W = g.w.in;
  for_each_window(
      g,
      [&](int64_t o, int64_t oh, int64_t ow) {
        int32_t first = static_cast<int32_t>(g.h.start[oh] * W + g.w.start[ow]);
        for (int64_t c = 0; c < C; ++c) {
          y[o + c] = -std::numeric_limits<T>::infinity();
          arg[o + c] = first;
        }
      },
      [&](int64_t o, int64_t i, int32_t pos) {
        T* yr = y + o;
        int32_t* ar = arg + o;
        const T* xr = x + i;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          T v = xr[c], best = yr[c];
          int32_t a = ar[c];
          bool take = (v > best) | (v != v);  // NOTE: `|`, not `||`: no branch, so it vectorises
          yr[c] = take ? v : best;
          ar[c] = take ? pos : a;
        }
      },
      [](int64_t, int64_t, int64_t) {});
}

// dx at (ih, iw) = sum of gy over the covering outputs whose argmax is (ih, iw).
template <typename T>
void max_backward(const T* gy, const int32_t* arg, const Geom& g, T* dx) {
  const int64_t C = g.C;
  for_each_covering(g, dx, [&](int64_t i, int64_t o, int32_t pos, int64_t, int64_t) {
    T* dr = dx + i;
    const T* gr = gy + o;
    const int32_t* ar = arg + o;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      T gv = gr[c];  // loaded unconditionally, so the select vectorises
      dr[c] += ar[c] == pos ? gv : T(0);
    }
  });
}

// y = sum over the window / (count_h[oh] * count_w[ow]).
template <typename T>
void avg_forward(const T* x, const Geom& g, T* y) {
  const int64_t C = g.C;
  for_each_window(
      g, [&](int64_t o, int64_t, int64_t) { for (int64_t c = 0; c < C; ++c) y[o + c] = T(0); },
      [&](int64_t o, int64_t i, int32_t) {
        T* yr = y + o;
        const T* xr = x + i;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] += xr[c];
      },
      [&](int64_t o, int64_t oh, int64_t ow) {
        T inv = T(1) / static_cast<T>(g.h.count[oh] * g.w.count[ow]);
        T* yr = y + o;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] *= inv;
      });
}

template <typename T>
void avg_backward(const T* gy, const Geom& g, T* dx) {
  const int64_t C = g.C;
  for_each_covering(g, dx, [&](int64_t i, int64_t o, int32_t, int64_t oh, int64_t ow) {
    T* dr = dx + i;
    const T* gr = gy + o;
    T inv = T(1) / static_cast<T>(g.h.count[oh] * g.w.count[ow]);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dr[c] += gr[c] * inv;
  });
}

void check_input(const char* op, const Tensor& x) {
  op_device(op, {x});
  nn::check_floating(op, "x", x);
  KILN_CHECK(x.dim() == 4, op, ": x must be 4-D (N, H, W, C), got ", x.str());
  KILN_CHECK(x.size(1) * x.size(2) <= std::numeric_limits<int32_t>::max(), op, ": input plane of ", x.str(),
             " is too large");
}

Geom make_geom(const Tensor& x, Axis h, Axis w) { return Geom{x.size(0), x.size(3), std::move(h), std::move(w)}; }

Geom pool_geom(const char* op, const Tensor& x, const Pool2dParams& p, bool count_include_pad) {
  check_input(op, x);
  KILN_CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0, op, ": kernel ", p.kernel_h, "x",
             p.kernel_w, " and stride ", p.stride_h, "x", p.stride_w, " must be positive (x ", x.str(), ")");
  KILN_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w, op,
             ": padding ", p.pad_h, "x", p.pad_w, " must be >= 0 and at most half the kernel ", p.kernel_h, "x",
             p.kernel_w, " (x ", x.str(), ")");
  Shape out = pool2d_output_shape(x.shape(), p);
  KILN_CHECK(out[1] > 0 && out[2] > 0, op, ": kernel ", p.kernel_h, "x", p.kernel_w, " with padding ", p.pad_h,
             "x", p.pad_w, " does not fit input ", x.str(), " (output ", shape_str(out), ")");
  return make_geom(x, pool_axis(x.size(1), p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode, count_include_pad),
                   pool_axis(x.size(2), p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode, count_include_pad));
}

Shape out_shape(const Geom& g) { return {g.N, g.h.out, g.w.out, g.C}; }
Shape in_shape(const Geom& g) { return {g.N, g.h.in, g.w.in, g.C}; }

// Average pooling of any geometry, recorded as `name`. The backward needs only the geometry.
Tensor avg_pool(const char* name, const Tensor& x, const Geom& g) {
  DType ct = nn::compute_dtype(x.dtype());
  Tensor xc = nn::to_compute(x, ct);
  Tensor y = Tensor::empty(out_shape(g), ct);
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    avg_forward<T>(xc.data<T>(), g, y.data<T>());
  });
  return record(name, {x}, nn::from_compute(y, x.dtype()), [g, ct, dt = x.dtype()](const Tensor& gy) {
    Tensor gc = nn::to_compute(gy, ct);
    Tensor dx = Tensor::empty(in_shape(g), ct);
    nn::dispatch_compute(ct, [&](auto t) {
      using T = decltype(t);
      avg_backward<T>(gc.data<T>(), g, dx.data<T>());
    });
    return grads{nn::from_compute(dx, dt)};
  });
}

#ifdef KILN_WITH_CUDA
// The CUDA ops with their backward closures (inputs already checked).
Tensor max_pool_cuda(const Tensor& x, const Pool2dParams& p) {
  Tensor idx;
  Tensor y = cuda::max_pool2d_forward(x.detach(), p, needs_record({x}) ? &idx : nullptr);
  return record("max_pool2d", {x}, y, [idx, p, xs = x.shape(), dt = x.dtype()](const Tensor& gy) {
    return grads{cuda::max_pool2d_backward(gy.dtype() == dt ? gy : gy.to(dt), idx, xs, p)};
  });
}
Tensor avg_pool_cuda(const Tensor& x, const Pool2dParams& p) {
  Tensor y = cuda::avg_pool2d_forward(x.detach(), p);
  return record("avg_pool2d", {x}, y, [p, xs = x.shape(), dt = x.dtype()](const Tensor& gy) {
    return grads{cuda::avg_pool2d_backward(gy.dtype() == dt ? gy : gy.to(dt), xs, p)};
  });
}
Tensor adaptive_avg_pool_cuda(const Tensor& x, int64_t out_h, int64_t out_w) {
  Tensor y = cuda::adaptive_avg_pool2d_forward(x.detach(), out_h, out_w);
  return record("adaptive_avg_pool2d", {x}, y, [xs = x.shape(), dt = x.dtype()](const Tensor& gy) {
    return grads{cuda::adaptive_avg_pool2d_backward(gy.dtype() == dt ? gy : gy.to(dt), xs)};
  });
}
Tensor global_avg_pool_cuda(const Tensor& x) {
  Tensor y = cuda::global_avg_pool_forward(x.detach());
  return record("global_avg_pool", {x}, y, [xs = x.shape(), dt = x.dtype()](const Tensor& gy) {
    return grads{cuda::global_avg_pool_backward(gy.dtype() == dt ? gy : gy.to(dt), xs)};
  });
}
#endif

}  // namespace

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p) {
  KILN_CHECK(x.size() == 4, "pool2d_output_shape: x must be 4-D (N, H, W, C), got ", shape_str(x));
  return {x[0], pool_out_size(x[1], p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode),
          pool_out_size(x[2], p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode), x[3]};
}

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  Geom g = pool_geom("max_pool2d", x, p, true);
  if (x.device().is_cuda()) {
#ifdef KILN_WITH_CUDA
    return max_pool_cuda(x, p);
#endif
  }
  DType ct = nn::compute_dtype(x.dtype());
  Tensor xc = nn::to_compute(x, ct);
  Tensor y = Tensor::empty(out_shape(g), ct);
  Tensor arg = Tensor::empty(out_shape(g), DType::i32);
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    max_forward<T>(xc.data<T>(), g, y.data<T>(), arg.data<int32_t>());
  });
  return record("max_pool2d", {x}, nn::from_compute(y, x.dtype()), [g, arg, ct, dt = x.dtype()](const Tensor& gy) {
    Tensor gc = nn::to_compute(gy, ct);
    Tensor dx = Tensor::empty(in_shape(g), ct);
    nn::dispatch_compute(ct, [&](auto t) {
      using T = decltype(t);
      max_backward<T>(gc.data<T>(), arg.data<int32_t>(), g, dx.data<T>());
    });
    return grads{nn::from_compute(dx, dt)};
  });
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  Geom g = pool_geom("avg_pool2d", x, p, p.count_include_pad);
  if (x.device().is_cuda()) {
#ifdef KILN_WITH_CUDA
    return avg_pool_cuda(x, p);
#endif
  }
  return avg_pool("avg_pool2d", x, g);
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  check_input("adaptive_avg_pool2d", x);
  KILN_CHECK(out_h > 0 && out_w > 0, "adaptive_avg_pool2d: output size ", out_h, "x", out_w,
             " must be positive (x ", x.str(), ")");
  KILN_CHECK(x.size(1) > 0 && x.size(2) > 0, "adaptive_avg_pool2d: empty input plane in ", x.str());
  if (x.device().is_cuda()) {
#ifdef KILN_WITH_CUDA
    return adaptive_avg_pool_cuda(x, out_h, out_w);
#endif
  }
  return avg_pool("adaptive_avg_pool2d", x,
                  make_geom(x, adaptive_axis(x.size(1), out_h), adaptive_axis(x.size(2), out_w)));
}

Tensor global_avg_pool(const Tensor& x) {
  check_input("global_avg_pool", x);
  KILN_CHECK(x.size(1) > 0 && x.size(2) > 0, "global_avg_pool: empty input plane in ", x.str());
  if (x.device().is_cuda()) {
#ifdef KILN_WITH_CUDA
    return global_avg_pool_cuda(x);
#endif
  }
  Tensor y = avg_pool("global_avg_pool", x, make_geom(x, adaptive_axis(x.size(1), 1), adaptive_axis(x.size(2), 1)));
  return y.reshape({x.size(0), x.size(3)});
}

}  // namespace kiln::ops
