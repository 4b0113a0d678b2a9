// Pooling on NHWC activations with our own kernels, PyTorch's semantics (ceil_mode, padding,
// count_include_pad, adaptive bins). One thread per output element in the forward (consecutive
// threads take consecutive channels, so loads coalesce); the backward is a gather — one thread per
// input element summing the windows that cover it — so it needs no atomics and is deterministic.
// Max pooling keeps its argmax (h*W + w, i32) for the backward. Tests: tests/gpu/pool_test.cpp.
#include "core/cuda/cuda_ops.h"
#include "core/cuda/kernel_util.cuh"

namespace kiln::cuda {
namespace {

struct Geo {
  int64_t N, H, W, C, OH, OW, kh, kw, sh, sw, ph, pw;
};

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode) {
  int64_t num = in + 2 * pad - k + (ceil_mode ? s - 1 : 0);
  int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;  // the last window must start inside the input or left pad
  return out;
}

Geo geo(const char* op, const Shape& x, const ops::Pool2dParams& p) {
  KILN_CHECK(x.size() == 4, op, ": x must be (N, H, W, C), got ", shape_str(x));
  KILN_CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0 && p.pad_h >= 0 && p.pad_w >= 0, op,
             ": kernel and stride must be > 0 and padding >= 0");
  KILN_CHECK(p.pad_h <= p.kernel_h / 2 && p.pad_w <= p.kernel_w / 2, op, ": padding ", p.pad_h, "x", p.pad_w,
             " must be at most half the kernel ", p.kernel_h, "x", p.kernel_w);
  Geo g{x[0], x[1], x[2], x[3], 0, 0, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w};
  g.OH = out_size(g.H, g.kh, g.sh, g.ph, p.ceil_mode);
  g.OW = out_size(g.W, g.kw, g.sw, g.pw, p.ceil_mode);
  KILN_CHECK(g.OH > 0 && g.OW > 0, op, ": input ", shape_str(x), " is smaller than the ", p.kernel_h, "x", p.kernel_w,
             " window");
  return g;
}

struct Nhwc {
  int64_t n, h, w, c;
};
// (n, h, w, c) of element i of an (N, H, W, C) tensor.
__device__ __forceinline__ Nhwc nhwc_index(int64_t i, int64_t H, int64_t W, int64_t C) {
  int64_t c = i % C, t = i / C;
  int64_t w = t % W;
  t /= W;
  return {t / H, t % H, w, c};
}

// The outputs along one axis whose windows cover input position h: [lo, hi).
__device__ __forceinline__ void covering(int64_t h, int64_t k, int64_t s, int64_t pad, int64_t out, int64_t& lo,
                                         int64_t& hi) {
  lo = (h + pad < k) ? 0 : (h + pad - k) / s + 1;
  hi = min((h + pad) / s + 1, out);
}

// count_include_pad divisor: the window clipped to the padded input; else the valid elements.
__device__ __forceinline__ int64_t avg_divisor(const Geo& g, int64_t oh, int64_t ow, bool include_pad) {
  int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  int64_t he = min(hs + g.kh, g.H + g.ph), we = min(ws + g.kw, g.W + g.pw);
  if (include_pad) return (he - hs) * (we - ws);
  hs = max(hs, int64_t(0));
  ws = max(ws, int64_t(0));
  he = min(he, g.H);
  we = min(we, g.W);
  return (he - hs) * (we - ws);
}

template <typename T>
__global__ void max_fwd_kernel(const T* x, T* y, int32_t* idx, Geo g, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    auto [b, oh, ow, c] = nhwc_index(i, g.OH, g.OW, g.C);
    int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    int64_t he = min(hs + g.kh, g.H), we = min(ws + g.kw, g.W);
    hs = max(hs, int64_t(0));
    ws = max(ws, int64_t(0));
    float best = -INFINITY;
    int64_t arg = hs * g.W + ws;
    const T* img = x + b * g.H * g.W * g.C + c;
    for (int64_t h = hs; h < he; ++h)
      for (int64_t w = ws; w < we; ++w) {
        float v = to_float(img[(h * g.W + w) * g.C]);
        if (v > best || isnan(v)) {  // first maximum wins; NaN propagates
          best = v;
          arg = h * g.W + w;
        }
      }
    y[i] = from_float<T>(best);
    if (idx) idx[i] = static_cast<int32_t>(arg);
  }
}

template <typename T>
__global__ void max_bwd_kernel(const T* gy, const int32_t* idx, T* gx, Geo g, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    auto [b, h, w, c] = nhwc_index(i, g.H, g.W, g.C);
    int64_t oh0, oh1, ow0, ow1;
    covering(h, g.kh, g.sh, g.ph, g.OH, oh0, oh1);
    covering(w, g.kw, g.sw, g.pw, g.OW, ow0, ow1);
    int32_t me = static_cast<int32_t>(h * g.W + w);
    float acc = 0.f;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        int64_t o = ((b * g.OH + oh) * g.OW + ow) * g.C + c;
        if (idx[o] == me) acc += to_float(gy[o]);
      }
    gx[i] = from_float<T>(acc);
  }
}

template <typename T>
__global__ void avg_fwd_kernel(const T* x, T* y, Geo g, bool include_pad, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    auto [b, oh, ow, c] = nhwc_index(i, g.OH, g.OW, g.C);
    int64_t hs = max(oh * g.sh - g.ph, int64_t(0)), ws = max(ow * g.sw - g.pw, int64_t(0));
    int64_t he = min(oh * g.sh - g.ph + g.kh, g.H), we = min(ow * g.sw - g.pw + g.kw, g.W);
    const T* img = x + b * g.H * g.W * g.C + c;
    float acc = 0.f;
    for (int64_t h = hs; h < he; ++h)
      for (int64_t w = ws; w < we; ++w) acc += to_float(img[(h * g.W + w) * g.C]);
    y[i] = from_float<T>(acc / static_cast<float>(avg_divisor(g, oh, ow, include_pad)));
  }
}

template <typename T>
__global__ void avg_bwd_kernel(const T* gy, T* gx, Geo g, bool include_pad, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    auto [b, h, w, c] = nhwc_index(i, g.H, g.W, g.C);
    int64_t oh0, oh1, ow0, ow1;
    covering(h, g.kh, g.sh, g.ph, g.OH, oh0, oh1);
    covering(w, g.kw, g.sw, g.pw, g.OW, ow0, ow1);
    float acc = 0.f;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow)
        acc += to_float(gy[((b * g.OH + oh) * g.OW + ow) * g.C + c]) /
               static_cast<float>(avg_divisor(g, oh, ow, include_pad));
    gx[i] = from_float<T>(acc);
  }
}

__device__ __forceinline__ int64_t bin_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
__device__ __forceinline__ int64_t bin_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

template <typename T>
__global__ void adaptive_fwd_kernel(const T* x, T* y, Geo g, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    auto [b, oh, ow, c] = nhwc_index(i, g.OH, g.OW, g.C);
    int64_t hs = bin_start(oh, g.H, g.OH), he = bin_end(oh, g.H, g.OH);
    int64_t ws = bin_start(ow, g.W, g.OW), we = bin_end(ow, g.W, g.OW);
    const T* img = x + b * g.H * g.W * g.C + c;
    float acc = 0.f;
    for (int64_t h = hs; h < he; ++h)
      for (int64_t w = ws; w < we; ++w) acc += to_float(img[(h * g.W + w) * g.C]);
    y[i] = from_float<T>(acc / static_cast<float>((he - hs) * (we - ws)));
  }
}

template <typename T>
__global__ void adaptive_bwd_kernel(const T* gy, T* gx, Geo g, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    auto [b, h, w, c] = nhwc_index(i, g.H, g.W, g.C);
    // Bins that may hold h: [floor(h*OH/H), ceil((h+1)*OH/H)), each checked.
    int64_t oh0 = (h * g.OH) / g.H, oh1 = min(((h + 1) * g.OH + g.H - 1) / g.H, g.OH);
    int64_t ow0 = (w * g.OW) / g.W, ow1 = min(((w + 1) * g.OW + g.W - 1) / g.W, g.OW);
    float acc = 0.f;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      int64_t hs = bin_start(oh, g.H, g.OH), he = bin_end(oh, g.H, g.OH);
      if (h < hs || h >= he) continue;
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        int64_t ws = bin_start(ow, g.W, g.OW), we = bin_end(ow, g.W, g.OW);
        if (w < ws || w >= we) continue;
        acc += to_float(gy[((b * g.OH + oh) * g.OW + ow) * g.C + c]) / static_cast<float>((he - hs) * (we - ws));
      }
    }
    gx[i] = from_float<T>(acc);
  }
}

template <typename T>
__global__ void global_bwd_kernel(const T* gy, T* gx, int64_t HWC, int64_t C, float inv, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    gx[i] = from_float<T>(to_float(gy[(i / HWC) * C + i % C]) * inv);
}

// Runs kernel(tag) with the element type of dt over n elements; grid-stride launch on the device's stream.
template <typename F>
void launch(const char* op, int device, DType dt, int64_t n, F f) {
  if (n == 0) return;
  DeviceGuard guard(device);
  constexpr int kThreads = 256;
  int grid = grid_for(device, n, kThreads);
  cudaStream_t s = stream_of(device);
  dispatch_float(dt, op, [&](auto tag) { f(tag, grid, kThreads, s); });
  CUDA_CHECK_LAUNCH();
}

void check_grad(const char* op, const Tensor& gy, const Geo& g) {
  Shape ys = {g.N, g.OH, g.OW, g.C};
  KILN_CHECK(gy.shape() == ys, op, ": gradient ", gy.str(), " does not match the output ", shape_str(ys));
}

template <typename T> T* out_ptr(const Tensor& t) { return static_cast<T*>(t.raw_data()); }
template <typename T> const T* in_ptr(const Tensor& t) { return static_cast<const T*>(t.raw_data()); }

}  // namespace

Shape pool2d_output_shape(const Shape& x, const ops::Pool2dParams& p) {
  Geo g = geo("pool2d", x, p);
  return {g.N, g.OH, g.OW, g.C};
}

Tensor max_pool2d_forward(const Tensor& x0, const ops::Pool2dParams& p, Tensor* indices) {
  int device = same_device("max_pool2d", {&x0});
  Geo g = geo("max_pool2d", x0.shape(), p);
  KILN_CHECK(g.H * g.W <= INT32_MAX, "max_pool2d: images of 2^31 pixels or more are not supported");
  Tensor x = packed(x0);
  Tensor y = empty_on({g.N, g.OH, g.OW, g.C}, x.dtype(), x);
  Tensor idx = indices ? Tensor::empty(y.shape(), DType::i32, x.device()) : Tensor();
  launch("max_pool2d", device, x.dtype(), y.numel(), [&](auto tag, int grid, int threads, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    max_fwd_kernel<T><<<grid, threads, 0, s>>>(in_ptr<T>(x), out_ptr<T>(y),
                                               idx.defined() ? out_ptr<int32_t>(idx) : nullptr, g, y.numel());
  });
  if (indices) *indices = idx;
  return y;
}

Tensor max_pool2d_backward(const Tensor& gy0, const Tensor& indices0, const Shape& x_shape, const ops::Pool2dParams& p) {
  int device = same_device("max_pool2d_backward", {&gy0, &indices0});
  Geo g = geo("max_pool2d_backward", x_shape, p);
  check_grad("max_pool2d_backward", gy0, g);
  KILN_CHECK(indices0.dtype() == DType::i32 && indices0.shape() == gy0.shape(), "max_pool2d_backward: indices ",
             indices0.str(), " must be i32 shaped like the gradient ", gy0.str());
  Tensor gy = packed(gy0), idx = packed(indices0);
  Tensor gx = empty_on(x_shape, gy.dtype(), gy);
  launch("max_pool2d_backward", device, gy.dtype(), gx.numel(), [&](auto tag, int grid, int threads, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    max_bwd_kernel<T><<<grid, threads, 0, s>>>(in_ptr<T>(gy), in_ptr<int32_t>(idx), out_ptr<T>(gx), g, gx.numel());
  });
  return gx;
}

Tensor avg_pool2d_forward(const Tensor& x0, const ops::Pool2dParams& p) {
  int device = same_device("avg_pool2d", {&x0});
  Geo g = geo("avg_pool2d", x0.shape(), p);
  Tensor x = packed(x0);
  Tensor y = empty_on({g.N, g.OH, g.OW, g.C}, x.dtype(), x);
  launch("avg_pool2d", device, x.dtype(), y.numel(), [&](auto tag, int grid, int threads, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    avg_fwd_kernel<T><<<grid, threads, 0, s>>>(in_ptr<T>(x), out_ptr<T>(y), g, p.count_include_pad, y.numel());
  });
  return y;
}

Tensor avg_pool2d_backward(const Tensor& gy0, const Shape& x_shape, const ops::Pool2dParams& p) {
  int device = same_device("avg_pool2d_backward", {&gy0});
  Geo g = geo("avg_pool2d_backward", x_shape, p);
  check_grad("avg_pool2d_backward", gy0, g);
  Tensor gy = packed(gy0);
  Tensor gx = empty_on(x_shape, gy.dtype(), gy);
  launch("avg_pool2d_backward", device, gy.dtype(), gx.numel(), [&](auto tag, int grid, int threads, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    avg_bwd_kernel<T><<<grid, threads, 0, s>>>(in_ptr<T>(gy), out_ptr<T>(gx), g, p.count_include_pad, gx.numel());
  });
  return gx;
}

Tensor global_avg_pool_forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4, "global_avg_pool: x must be (N, H, W, C), got ", x.str());
  KILN_CHECK(x.size(1) * x.size(2) > 0, "global_avg_pool: empty image in ", x.str());
  return mean(x, {1, 2}, false);
}

Tensor global_avg_pool_backward(const Tensor& gy0, const Shape& x_shape) {
  int device = same_device("global_avg_pool_backward", {&gy0});
  KILN_CHECK(x_shape.size() == 4 && gy0.shape() == Shape({x_shape[0], x_shape[3]}), "global_avg_pool_backward: gradient ",
             gy0.str(), " for input ", shape_str(x_shape));
  Tensor gy = packed(gy0);
  Tensor gx = empty_on(x_shape, gy.dtype(), gy);
  int64_t HW = x_shape[1] * x_shape[2], C = x_shape[3];
  float inv = HW > 0 ? static_cast<float>(1.0 / static_cast<double>(HW)) : 0.f;
  launch("global_avg_pool_backward", device, gy.dtype(), gx.numel(),
         [&](auto tag, int grid, int threads, cudaStream_t s) {
           using T = typename decltype(tag)::type;
           global_bwd_kernel<T><<<grid, threads, 0, s>>>(in_ptr<T>(gy), out_ptr<T>(gx), HW * C, C, inv, gx.numel());
         });
  return gx;
}

Tensor adaptive_avg_pool2d_forward(const Tensor& x0, int64_t out_h, int64_t out_w) {
  int device = same_device("adaptive_avg_pool2d", {&x0});
  KILN_CHECK(x0.dim() == 4, "adaptive_avg_pool2d: x must be (N, H, W, C), got ", x0.str());
  KILN_CHECK(out_h > 0 && out_w > 0 && x0.size(1) > 0 && x0.size(2) > 0, "adaptive_avg_pool2d: output ", out_h, "x",
             out_w, " from ", x0.str());
  Tensor x = packed(x0);
  Geo g{x.size(0), x.size(1), x.size(2), x.size(3), out_h, out_w, 0, 0, 1, 1, 0, 0};
  Tensor y = empty_on({g.N, out_h, out_w, g.C}, x.dtype(), x);
  launch("adaptive_avg_pool2d", device, x.dtype(), y.numel(), [&](auto tag, int grid, int threads, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    adaptive_fwd_kernel<T><<<grid, threads, 0, s>>>(in_ptr<T>(x), out_ptr<T>(y), g, y.numel());
  });
  return y;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& gy0, const Shape& x_shape) {
  int device = same_device("adaptive_avg_pool2d_backward", {&gy0});
  KILN_CHECK(x_shape.size() == 4 && gy0.dim() == 4 && gy0.size(0) == x_shape[0] && gy0.size(3) == x_shape[3],
             "adaptive_avg_pool2d_backward: gradient ", gy0.str(), " for input ", shape_str(x_shape));
  Tensor gy = packed(gy0);
  Geo g{x_shape[0], x_shape[1], x_shape[2], x_shape[3], gy.size(1), gy.size(2), 0, 0, 1, 1, 0, 0};
  Tensor gx = empty_on(x_shape, gy.dtype(), gy);
  launch("adaptive_avg_pool2d_backward", device, gy.dtype(), gx.numel(),
         [&](auto tag, int grid, int threads, cudaStream_t s) {
           using T = typename decltype(tag)::type;
           adaptive_bwd_kernel<T><<<grid, threads, 0, s>>>(in_ptr<T>(gy), out_ptr<T>(gx), g, gx.numel());
         });
  return gx;
}

}  // namespace kiln::cuda
