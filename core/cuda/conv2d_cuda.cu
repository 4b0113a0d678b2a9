// 2-D convolution on cuDNN (legacy imperative API, still supported in cuDNN 9), NHWC activations and
// KRSC (= kiln's (Cout, KH, KW, Cin/groups)) filters: CUDNN_TENSOR_NHWC for both, so no reorders.
// Compute type f32 for every dtype (f16/bf16 data accumulate in f32 on tensor cores). f32 data may
// use TF32 tensor cores when conv_allow_tf32() (PyTorch's default for convolutions); never the
// f16-downconverting CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION.
// Algorithms: per shape and direction, cuDNN's heuristics (cudnnGet*Algorithm_v7) or, in benchmark
// mode, measured (cudnnFind*AlgorithmEx); the candidates that fit conv_workspace_limit() are kept in
// order and cached with the descriptors. A run that cannot get its workspace falls to the next
// candidate; one cuDNN reports as unsupported is dropped for good. Workspaces come from the caching
// allocator (counted in memory stats). Plans are keyed by the whole shape, batch included: cuDNN's
// heuristics depend on N, and a heuristics query is cheap (no execution), so a new batch size costs a
// query, not a search. Benchmark mode's search runs every algorithm, once per shape and batch, so
// AutoBatch probes with benchmark mode off (tools/engine/trainer.cpp) and only the chosen batch is searched.
// A tensor of 2^31 elements or more throws TooLargeError (AutoBatch: "does not fit").
// The kernels of core/ops/conv2d.h's slots are conv2d_forward and conv2d_backward below; the op is
// core/ops/conv2d.cpp. Tests: tests/gpu/conv2d_test.cpp.
#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <vector>

#include "core/cuda/cuda_ops.h"
#include "core/cuda/kernel_util.cuh"

namespace kiln::cuda {
namespace {

enum Dir { kFwd = 0, kBwdData = 1, kBwdFilter = 2 };
const char* const kDirName[3] = {"forward", "backward-data", "backward-filter"};

struct Candidate {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  std::vector<Candidate> cand[3];
  bool searched[3] = {false, false, false};
};

// N, H, W, Cin, Cout, KH, KW, stride, pad, dilation, groups, dtype, tf32, benchmark mode
using Key = std::array<int64_t, 17>;

struct Geometry {
  int64_t N, H, W, Cin, Cout, KH, KW, OH, OW;
  std::string str;
};

struct Cache {
  std::mutex mu;
  std::map<Key, Plan> plans;
};
Cache& cache(int device) { return per_device<Cache>(device); }

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: KILN_FAIL("conv2d: dtype ", dtype_name(t), " is not supported on CUDA; accepted: f32, f16, bf16");
  }
}

Geometry geometry(const char* op, const Shape& x, const Shape& w, const ops::Conv2dParams& p) {
  KILN_CHECK(x.size() == 4 && w.size() == 4, op, ": x must be (N, H, W, Cin) and w (Cout, KH, KW, Cin/groups), got ",
             shape_str(x), " and ", shape_str(w));
  KILN_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1 && p.pad_h >= 0 &&
                 p.pad_w >= 0 && p.groups >= 1,
             op, ": stride and dilation must be >= 1, padding >= 0, groups >= 1");
  Geometry g{x[0], x[1], x[2], x[3], w[0], w[1], w[2], 0, 0, ""};
  g.str = "x " + shape_str(x) + ", w " + shape_str(w) + ", stride " + std::to_string(p.stride_h) + "x" +
          std::to_string(p.stride_w) + ", pad " + std::to_string(p.pad_h) + "x" + std::to_string(p.pad_w) +
          ", dilation " + std::to_string(p.dilation_h) + "x" + std::to_string(p.dilation_w) + ", groups " +
          std::to_string(p.groups);
  KILN_CHECK(g.Cin % p.groups == 0 && g.Cout % p.groups == 0 && w[3] * p.groups == g.Cin, op, ": ", g.str,
             ": channels do not match the groups (w's last dim must be Cin/groups, Cout divisible by groups)");
  g.OH = (g.H + 2 * p.pad_h - p.dilation_h * (g.KH - 1) - 1) / p.stride_h + 1;
  g.OW = (g.W + 2 * p.pad_w - p.dilation_w * (g.KW - 1) - 1) / p.stride_w + 1;
  KILN_CHECK(g.OH > 0 && g.OW > 0 && g.KH > 0 && g.KW > 0, op, ": ", g.str, ": the output would be empty");
  // cuDNN's legacy descriptors take int sizes and strides: each tensor must stay below 2^31
  // elements. A batch past that is "too large" (AutoBatch backs off from it like from an OOM).
  const double limit = static_cast<double>(INT_MAX) - 1;
  const double elems = static_cast<double>(std::max(g.N * g.H * g.W * g.Cin, g.N * g.OH * g.OW * g.Cout));
  if (elems > limit)
    throw TooLargeError(::kiln::detail::cat(op, ": ", g.str, ": a tensor of ", static_cast<int64_t>(elems),
                                    " elements; cuDNN's convolutions take fewer than 2^31 elements per tensor; use a "
                                    "smaller batch"),
                        elems / limit);
  return g;
}

Plan make_plan(const Geometry& g, const ops::Conv2dParams& p, DType dt) {
  cudnnDataType_t t = cudnn_type(dt);
  Plan plan;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan.x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan.y));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan.w));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan.conv));
  auto i = [](int64_t v) { return static_cast<int>(v); };
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.x, CUDNN_TENSOR_NHWC, t, i(g.N), i(g.Cin), i(g.H), i(g.W)));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.y, CUDNN_TENSOR_NHWC, t, i(g.N), i(g.Cout), i(g.OH), i(g.OW)));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan.w, t, CUDNN_TENSOR_NHWC, i(g.Cout), i(g.Cin / p.groups), i(g.KH), i(g.KW)));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan.conv, i(p.pad_h), i(p.pad_w), i(p.stride_h), i(p.stride_w),
                                              i(p.dilation_h), i(p.dilation_w), CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan.conv, i(p.groups)));
  int n = 0, c = 0, h = 0, w = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan.conv, plan.x, plan.w, &n, &c, &h, &w));
  KILN_CHECK(n == g.N && c == g.Cout && h == g.OH && w == g.OW, "conv2d: ", g.str, ": cuDNN computes output (", n, ", ",
             c, ", ", h, ", ", w, "), kiln (", g.N, ", ", g.Cout, ", ", g.OH, ", ", g.OW, ")");
  return plan;
}

cudnnMathType_t initial_math(DType dt, bool tf32) {
  if (dt != DType::f32) return CUDNN_TENSOR_OP_MATH;
  return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

bool math_ok(DType dt, bool tf32, cudnnMathType_t m) {
  if (dt != DType::f32) return true;
  if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;  // would round f32 data to f16
  return tf32 || m == CUDNN_FMA_MATH;
}

// Keeps the usable results in cuDNN's order; if none fits the limit, the usable ones by workspace size.
template <typename Perf>
std::vector<Candidate> filter(const Perf* perf, int n, DType dt, bool tf32, size_t limit) {
  std::vector<Candidate> fit, all;
  for (int k = 0; k < n; ++k) {
    if (perf[k].status != CUDNN_STATUS_SUCCESS || !math_ok(dt, tf32, perf[k].mathType)) continue;
    Candidate c{static_cast<int>(perf[k].algo), perf[k].mathType, perf[k].memory};
    all.push_back(c);
    if (c.workspace <= limit) fit.push_back(c);
  }
  if (fit.empty()) {
    std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) { return a.workspace < b.workspace; });
    return all;
  }
  return fit;
}

// A scratch buffer for cudnnFind*: as much of the limit as the device can give.
Tensor find_workspace(int device, size_t limit) {
  auto [free_b, total_b] = cuda_mem_get_info(device);
  size_t bytes = std::min(limit, free_b / 10 * 8);
  while (true) {
    try {
      return Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, Device::cuda(device));
    } catch (const OutOfMemoryError&) {
      if (bytes < (size_t(1) << 20)) return Tensor::empty({0}, DType::u8, Device::cuda(device));
      bytes /= 2;
    }
  }
}

// Fills plan.cand[dir]. `x`, `w`, `y` are the call's buffers (cudnnFind writes the output one).
void search(int device, Plan& plan, Dir dir, DType dt, bool tf32, const void* x, const void* w, const void* y,
            const std::string& what) {
  cudnnHandle_t h = cudnn_handle(device);
  size_t limit = conv_workspace_limit();
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, initial_math(dt, tf32)));
  int n = 0, count = 0;
  bool bench = cudnn_benchmark();
  Tensor ws = bench ? find_workspace(device, limit) : Tensor();
  void* wsp = bench ? ws.raw_data() : nullptr;
  size_t wsb = bench ? ws.nbytes() : 0;
  if (dir == kFwd) {
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(count, 1)));
    if (bench)
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, plan.x, x, plan.w, w, plan.conv, plan.y,
                                                         const_cast<void*>(y), count, &n, perf.data(), wsp, wsb));
    else
      CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, plan.x, plan.w, plan.conv, plan.y, count, &n, perf.data()));
    plan.cand[dir] = filter(perf.data(), n, dt, tf32, bench ? wsb : limit);
  } else if (dir == kBwdData) {
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(std::max(count, 1)));
    if (bench)
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, plan.w, w, plan.y, y, plan.conv, plan.x,
                                                              const_cast<void*>(x), count, &n, perf.data(), wsp, wsb));
    else
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, plan.w, plan.y, plan.conv, plan.x, count, &n,
                                                              perf.data()));
    plan.cand[dir] = filter(perf.data(), n, dt, tf32, bench ? wsb : limit);
  } else {
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(std::max(count, 1)));
    if (bench)
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, plan.x, x, plan.y, y, plan.conv, plan.w,
                                                                const_cast<void*>(w), count, &n, perf.data(), wsp, wsb));
    else
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, plan.x, plan.y, plan.conv, plan.w, count, &n,
                                                                perf.data()));
    plan.cand[dir] = filter(perf.data(), n, dt, tf32, bench ? wsb : limit);
  }
  KILN_CHECK(!plan.cand[dir].empty(), "conv2d ", kDirName[dir], " (", what, ", ", dtype_name(dt),
             "): cuDNN offers no algorithm", (dt == DType::f32 && !tf32 ? " without TF32" : ""));
  plan.searched[dir] = true;
}

// Runs `call(candidate, workspace, bytes)` with the plan's candidates in order (see the file comment).
template <typename Call>
void run(int device, Plan& plan, Dir dir, const std::string& what, Call call) {
  auto& cands = plan.cand[dir];
  for (size_t k = 0; k < cands.size();) {
    Candidate c = cands[k];
    Tensor ws;
    if (c.workspace > 0) {
      try {
        ws = Tensor::empty({static_cast<int64_t>(c.workspace)}, DType::u8, Device::cuda(device));
      } catch (const OutOfMemoryError&) {
        if (k + 1 < cands.size()) {
          ++k;
          continue;
        }
        throw;
      }
    }
    CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, c.math));
    cudnnStatus_t st = call(c, ws.defined() ? ws.raw_data() : nullptr, c.workspace);
    if (st == CUDNN_STATUS_SUCCESS) return;
    if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED && cands.size() > 1) {
      cands.erase(cands.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    detail::throw_cudnn(st, (std::string("cudnnConvolution ") + kDirName[dir] + " (" + what + ")").c_str(), __FILE__,
                        __LINE__);
  }
  KILN_FAIL("conv2d ", kDirName[dir], " (", what, "): no cuDNN algorithm could run");
}

template <typename T, typename Index>
__global__ void add_bias_kernel(T* y, const float* b, Index n, Index C) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x)
    y[i] = from_float<T>(to_float(y[i]) + b[i % C]);
}

// The cached plan for this problem, created on first use. Caller holds the cache lock.
Plan& plan_for(Cache& c, const Geometry& g, const ops::Conv2dParams& p, DType dt, bool tf32) {
  Key key = {g.N, g.H, g.W, g.Cin, g.Cout, g.KH, g.KW, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
             p.dilation_h, p.dilation_w, p.groups, static_cast<int64_t>(dt), tf32, cudnn_benchmark()};
  auto it = c.plans.find(key);
  if (it == c.plans.end()) it = c.plans.emplace(key, make_plan(g, p, dt)).first;
  return it->second;
}

// Finds (once) and runs direction `dir` of this problem: call(handle, plan, algo, workspace, bytes).
// x, w, y: the call's buffers (cudnnFind, in benchmark mode, overwrites the direction's output).
template <typename Call>
void execute(int device, Dir dir, const Geometry& g, const ops::Conv2dParams& p, DType dt, const void* x,
             const void* w, const void* y, Call call) {
  bool tf32 = dt == DType::f32 && conv_allow_tf32();
  DeviceGuard guard(device);
  cudnnHandle_t h = cudnn_handle(device);
  Cache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mu);
  Plan& plan = plan_for(c, g, p, dt, tf32);
  if (!plan.searched[dir]) search(device, plan, dir, dt, tf32, x, w, y, g.str);
  run(device, plan, dir, g.str, [&](const Candidate& cd, void* ws, size_t wsb) { return call(h, plan, cd.algo, ws, wsb); });
}

// Checks a backward call's gradient against the problem and `other` (w or x) and returns their dtype.
DType check_backward(const char* op, const Tensor& gy, const Tensor& other, const Geometry& g) {
  Shape ys = {g.N, g.OH, g.OW, g.Cout};
  KILN_CHECK(gy.shape() == ys, op, ": gradient ", gy.str(), " for output ", shape_str(ys), " (", g.str, ")");
  KILN_CHECK(gy.dtype() == other.dtype(), op, ": gy ", gy.str(), " and ", other.str(), " must have one dtype");
  cudnn_type(gy.dtype());
  return gy.dtype();
}

const float kOne = 1.f, kZero = 0.f;

}  // namespace

Tensor conv2d_forward(const Tensor& x0, const Tensor& w0, const Tensor& b, const ops::Conv2dParams& p) {
  int device = same_device("conv2d", {&x0, &w0, &b});
  Geometry g = geometry("conv2d", x0.shape(), w0.shape(), p);
  KILN_CHECK(x0.dtype() == w0.dtype(), "conv2d: x ", x0.str(), " and w ", w0.str(), " must have one dtype");
  if (b.defined())
    KILN_CHECK(b.dim() == 1 && b.size(0) == g.Cout, "conv2d: bias ", b.str(), " must be (", g.Cout, ")");
  DType dt = x0.dtype();
  cudnn_type(dt);
  Tensor x = packed(x0), w = packed(w0);
  Tensor y = empty_on({g.N, g.OH, g.OW, g.Cout}, dt, x);
  if (g.N == 0) return y;
  execute(device, kFwd, g, p, dt, x.raw_data(), w.raw_data(), y.raw_data(),
          [&](cudnnHandle_t h, Plan& plan, int algo, void* ws, size_t wsb) {
            return cudnnConvolutionForward(h, &kOne, plan.x, x.raw_data(), plan.w, w.raw_data(), plan.conv,
                                           static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, wsb, &kZero, plan.y,
                                           y.raw_data());
          });
  if (b.defined()) {
    Tensor bf = packed_f32(b);
    constexpr int kThreads = 256;
    int64_t n = y.numel();
    DeviceGuard guard(device);
    dispatch_float(dt, "conv2d", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* py = static_cast<T*>(y.raw_data());
      const float* pb = static_cast<const float*>(bf.raw_data());
      int grid = grid_for(device, n, kThreads);
      if (fits_u32(n))
        add_bias_kernel<T, uint32_t><<<grid, kThreads, 0, stream_of(device)>>>(py, pb, uint32_t(n), uint32_t(g.Cout));
      else
        add_bias_kernel<T, int64_t><<<grid, kThreads, 0, stream_of(device)>>>(py, pb, n, g.Cout);
    });
    CUDA_CHECK_LAUNCH();
  }
  return y;
}

Tensor conv2d_backward_data(const Tensor& gy0, const Tensor& w0, const Shape& x_shape, const ops::Conv2dParams& p) {
  const char* op = "conv2d_backward_data";
  int device = same_device(op, {&gy0, &w0});
  Geometry g = geometry(op, x_shape, w0.shape(), p);
  DType dt = check_backward(op, gy0, w0, g);
  Tensor gy = packed(gy0), w = packed(w0);
  Tensor dx = empty_on(x_shape, dt, gy);
  if (g.N == 0) return dx;
  execute(device, kBwdData, g, p, dt, dx.raw_data(), w.raw_data(), gy.raw_data(),
          [&](cudnnHandle_t h, Plan& plan, int algo, void* ws, size_t wsb) {
            return cudnnConvolutionBackwardData(h, &kOne, plan.w, w.raw_data(), plan.y, gy.raw_data(), plan.conv,
                                                static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, wsb, &kZero,
                                                plan.x, dx.raw_data());
          });
  return dx;
}

Tensor conv2d_backward_weight(const Tensor& gy0, const Tensor& x0, const Shape& w_shape, const ops::Conv2dParams& p) {
  const char* op = "conv2d_backward_weight";
  int device = same_device(op, {&gy0, &x0});
  Geometry g = geometry(op, x0.shape(), w_shape, p);
  DType dt = check_backward(op, gy0, x0, g);
  Tensor gy = packed(gy0), x = packed(x0);
  Tensor dw = empty_on(w_shape, dt, x);
  if (g.N == 0) return dw.zero_();
  execute(device, kBwdFilter, g, p, dt, x.raw_data(), dw.raw_data(), gy.raw_data(),
          [&](cudnnHandle_t h, Plan& plan, int algo, void* ws, size_t wsb) {
            return cudnnConvolutionBackwardFilter(h, &kOne, plan.x, x.raw_data(), plan.y, gy.raw_data(), plan.conv,
                                                  static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, wsb, &kZero,
                                                  plan.w, dw.raw_data());
          });
  return dw;
}

// The kernel of conv2d_backward_kernel (core/ops/conv2d.h): the passes asked for, grad_out first in the
// forward's dtype; the bias gradient is grad_out summed over (N, OH, OW).
Conv2dGrads conv2d_backward(const Tensor& gy0, const Tensor& x, const Tensor& w, const Conv2dBackwardArgs& a) {
  Tensor gy = gy0.dtype() == a.dtype ? gy0 : gy0.to(a.dtype);
  Conv2dGrads r;
  if (a.need_x) r.dx = conv2d_backward_data(gy, w, a.x_shape, a.p);
  if (a.need_w) r.dw = conv2d_backward_weight(gy, x, a.w_shape, a.p);
  if (a.need_b) r.db = sum(gy, {0, 1, 2});
  return r;
}

}  // namespace kiln::cuda
