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
// These are the CPU's kernels of core/ops/pool.h's slots; the ops, with their checks, are
// core/ops/pool.cpp, and core/cuda/pool_cuda.cu has the same semantics (the argmax is kept there too).
// Tests: tests/core/pool_test.cpp, tests/gpu/ops_dispatch_test.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops/nn_util.h"
#include "core/ops/pool.h"

namespace kiln::cpu {

using ops::Pool2dParams;
namespace nn = ops::nn;

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

// `out` windows (ops::pool2d_output_shape's size of this axis) of `k` inputs every `s`, from -pad.
Axis pool_axis(int64_t in, int64_t out, int64_t k, int64_t s, int64_t pad, bool count_include_pad) {
  Axis a;
  a.in = in;
  a.out = out;
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

Geom make_geom(const Shape& x, Axis h, Axis w) { return Geom{x[0], x[3], std::move(h), std::move(w)}; }

// The windows of max/avg pooling of an input of shape x (checked by the op).
Geom pool_geom(const Shape& x, const Pool2dParams& p, bool count_include_pad) {
  const Shape out = ops::pool2d_output_shape(x, p);
  return make_geom(x, pool_axis(x[1], out[1], p.kernel_h, p.stride_h, p.pad_h, count_include_pad),
                   pool_axis(x[2], out[2], p.kernel_w, p.stride_w, p.pad_w, count_include_pad));
}
Geom adaptive_geom(const Shape& x, int64_t out_h, int64_t out_w) {
  return make_geom(x, adaptive_axis(x[1], out_h), adaptive_axis(x[2], out_w));
}

Shape out_shape(const Geom& g) { return {g.N, g.h.out, g.w.out, g.C}; }
Shape in_shape(const Geom& g) { return {g.N, g.h.in, g.w.in, g.C}; }

// A tensor of `shape` in the compute dtype of `in`, filled by f(in's data, its data) (T = float or
// double: f is generic).
template <typename F>
Tensor compute_into(const Tensor& in, const Shape& shape, F f) {
  DType ct = nn::compute_dtype(in.dtype());
  Tensor ic = nn::to_compute(in, ct);
  Tensor out = Tensor::empty(shape, ct);
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    f(ic.data<T>(), out.data<T>());
  });
  return out;
}

Tensor avg_forward_of(const Tensor& x, const Geom& g) {
  return nn::from_compute(compute_into(x, out_shape(g), [&](const auto* a, auto* y) { avg_forward(a, g, y); }),
                          x.dtype());
}

// dx in the compute dtype of gy (the op converts it to x's dtype).
Tensor avg_backward_of(const Tensor& gy, const Geom& g) {
  return compute_into(gy, in_shape(g), [&](const auto* a, auto* dx) { avg_backward(a, g, dx); });
}

}  // namespace

Tensor max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor* indices) {
  const Geom g = pool_geom(x.shape(), p, true);
  DType ct = nn::compute_dtype(x.dtype());
  Tensor xc = nn::to_compute(x, ct);
  Tensor y = Tensor::empty(out_shape(g), ct);
  Tensor arg = Tensor::empty(out_shape(g), DType::i32);
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    max_forward<T>(xc.data<T>(), g, y.data<T>(), arg.data<int32_t>());
  });
  if (indices) *indices = arg;
  return nn::from_compute(y, x.dtype());
}

Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Shape& x_shape, const Pool2dParams& p) {
  const Geom g = pool_geom(x_shape, p, true);
  return compute_into(gy, in_shape(g),
                      [&](const auto* a, auto* dx) { max_backward(a, indices.data<int32_t>(), g, dx); });
}

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  return avg_forward_of(x, pool_geom(x.shape(), p, p.count_include_pad));
}
Tensor avg_pool2d_backward(const Tensor& gy, const Shape& x_shape, const Pool2dParams& p) {
  return avg_backward_of(gy, pool_geom(x_shape, p, p.count_include_pad));
}
Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t out_h, int64_t out_w) {
  return avg_forward_of(x, adaptive_geom(x.shape(), out_h, out_w));
}
Tensor adaptive_avg_pool2d_backward(const Tensor& gy, const Shape& x_shape) {
  return avg_backward_of(gy, adaptive_geom(x_shape, gy.size(1), gy.size(2)));
}
Tensor global_avg_pool_forward(const Tensor& x) {
  return avg_forward_of(x, adaptive_geom(x.shape(), 1, 1)).reshape({x.size(0), x.size(3)});
}
Tensor global_avg_pool_backward(const Tensor& gy, const Shape& x_shape) {
  return avg_backward_of(gy.reshape({x_shape[0], 1, 1, x_shape[3]}), adaptive_geom(x_shape, 1, 1));
}

}  // namespace kiln::cpu
