// cuDNN runtime fusion of the BN-affine + ReLU + conv + statistics chain (core/ops/conv_fusion.h):
// the kernel of conv_bn_stats_forward_kernel. One cuDNN graph (cudnn_frontend's graph API, the
// "scale-bias-ReLU-conv-genstats" pattern): pointwise MUL by scale, ADD bias, RELU_FWD, conv_fprop,
// genstats, NHWC activations and KRSC filters (= kiln's (Cout, KH, KW, Cin)), io in x's dtype,
// intermediate and compute in f32, sum and sum of squares in f32.
// Per device, a cache keyed by the whole shape (batch included), dtype and convolution parameters
// holds the built graph (building one costs milliseconds: once per shape), its workspace size, and the
// choice made the first time the shape is seen: the fused graph and the unfused chain (the op's public
// ops) run once each, their per-channel sums are compared (a fused result that disagrees is refused),
// then each is timed (best of 3, CUDA events on the device's stream) and the faster is kept for every
// later call of the shape. Every refusal (graph validation, operation graph, no engine from the
// heuristics, support check, plan build, execution status, disagreement, an exception from the
// frontend) is one line on stderr and the shape runs the unfused chain from then on.
// KILN_CUDNN_FUSION: 0 = never fuse, 1 = fuse where timing says so (default), force = fuse wherever
// cuDNN builds and agrees (tests, benchmarks); any other value is an error naming the accepted ones.
// Built without cuDNN's frontend headers (CMake's KILN_CUDNN_FRONTEND OFF), this kernel only runs the
// unfused chain. The frontend is used in its dynamic-loading mode: it resolves cuDNN's and CUDA's
// functions with dlsym on the libraries kiln is already linked with (found with dladdr), so its
// experimental NVRTC engines add no link dependency.
// The backward (stage 3, the kernel of conv_bn_stats_backward_kernel): two more graphs per shape, each
// with its own cache entry, check, timing and refusal as above: wgrad with the scale-bias-ReLU prologue
// (dw = conv_wgrad(dy, relu(x*scale + bias)), a never in memory) and dgrad + dReLU (da_m =
// relu_bwd(conv_dgrad(dy, w), x*scale + bias)), followed by one kiln kernel for dx = da_m*scale and the
// f32 sums dscale = sum(da_m*x), dbias = sum(da_m). The cache holds at most kConvFusionCacheEntries
// graphs per device (least recently used dropped; refused shapes kept apart, outside the bound).
// Tests: tests/gpu/conv_fusion_test.cpp.
#include <cstdio>
#include <cstdlib>
#include <cstring>  // the frontend uses std::strlen without including it when its JSON support is off
#include <map>
#include <mutex>
#include <string>

#include "core/cuda/cuda_ops.h"
#include "core/cuda/kernel_util.cuh"
#include "core/cuda/runtime.h"
#include "core/ops/conv_fusion.h"

#if KILN_CUDNN_FRONTEND
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

// The frontend's dynamic-loading mode reads cuDNN's handle from this global (its Python package sets it).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace kiln::cuda {
namespace {

enum class FusionMode { off, automatic, force };

FusionMode fusion_mode() {
  const char* v = std::getenv("KILN_CUDNN_FUSION");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "1") == 0) return FusionMode::automatic;
  if (std::strcmp(v, "0") == 0) return FusionMode::off;
  if (std::strcmp(v, "force") == 0) return FusionMode::force;
  KILN_FAIL("KILN_CUDNN_FUSION=", v,
            ": accepted values are 0 (never fuse), 1 (the default: fuse the shapes where the fused graph is "
            "faster) and force (fuse wherever cuDNN builds the graph)");
}

#if KILN_CUDNN_FRONTEND
namespace fe = cudnn_frontend;

// Points the frontend at the cuDNN (and CUDA runtime) kiln is linked with. Returns "" or why not.
std::string init_frontend() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    // The libcudnn.so.<major> already loaded (kiln links it), else the file its cudnnGetVersion is in.
    const std::string soname = "libcudnn.so." + std::to_string(CUDNN_MAJOR);
    void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
    Dl_info info{};
    if (h == nullptr && dladdr(reinterpret_cast<void*>(&cudnnGetVersion), &info) != 0 && info.dli_fname != nullptr)
      h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) {
      error = "cannot find the loaded cuDNN library (" + soname + ") for the frontend";
      return;
    }
    fe::cudnn_dlhandle = h;
    // The frontend opens libcudart.so.12, then .13, by name; name the one kiln uses instead, unless
    // the user already did.
    Dl_info rt{};
    if (std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME") == nullptr &&
        dladdr(reinterpret_cast<void*>(&cudaGetDevice), &rt) != 0 && rt.dli_fname != nullptr &&
        std::strstr(rt.dli_fname, "libcudart.so") != nullptr)
      setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", rt.dli_fname, 0);
  });
  return error;
}

fe::DataType_t fe_type(DType t) {
  switch (t) {
    case DType::f16: return fe::DataType_t::HALF;
    case DType::bf16: return fe::DataType_t::BFLOAT16;
    default: return fe::DataType_t::FLOAT;
  }
}

// N, H, W, Cin, Cout, KH, KW, stride h/w, pad h/w, dilation h/w, dtype, graph kind
using Key = std::array<int64_t, 15>;

// Which graph: the forward (scale-bias-ReLU-conv-genstats), the backward's wgrad with the same
// prologue, the backward's dgrad with the ReLU backward in its epilogue.
enum class Kind : int64_t { fprop = 0, wgrad = 1, dgrad_drelu = 2 };

Key make_key(Kind kind, const Tensor& x, const Tensor& w, const ops::Conv2dParams& p) {
  return Key{x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], w.shape()[0], w.shape()[1], w.shape()[2],
             p.stride_h,  p.stride_w,  p.pad_h,      p.pad_w,      p.dilation_h, p.dilation_w,
             static_cast<int64_t>(x.dtype()), static_cast<int64_t>(kind)};
}

enum Uid : int64_t { kX = 1, kScale, kBias, kW, kY, kSum, kSumSq, kGy, kDw, kDa };

struct Entry {
  int device = 0;
  Key key{};
  std::shared_ptr<fe::graph::Graph> graph;  // null until built; null for good when refused
  bool built = false, refused = false, timed = false, fused_faster = false;
  std::string reason;  // why refused
  int64_t workspace = 0;
  double fused_ms = -1, unfused_ms = -1;
  std::mutex mu;  // one thread builds or times a shape
};

// Per device: the entries, at most kConvFusionCacheEntries of them holding a graph (least recently
// used dropped first: an entry in use stays alive through its shared_ptr), and the refused shapes,
// kept outside the bound so that a refusal is printed once and holds for good.
struct Cache {
  std::mutex mu;
  std::map<Key, std::shared_ptr<Entry>> entries;
  ::kiln::detail::LruKeys<Key> lru{::kiln::detail::kConvFusionCacheEntries};
  std::set<Key> refused;
};

std::shared_ptr<Entry> entry_for(int device, const Key& k) {
  Cache& c = per_device<Cache>(device);
  std::lock_guard<std::mutex> lock(c.mu);
  auto& e = c.entries[k];
  if (!e) {
    e = std::make_shared<Entry>();
    e->device = device;
    e->key = k;
  }
  std::shared_ptr<Entry> out = e;  // alive even if the touch below drops it (a capacity of 1)
  if (c.refused.count(k) == 0)
    for (const Key& gone : c.lru.touch(k)) c.entries.erase(gone);
  return out;
}

std::string shape_text(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p) {
  return ::kiln::detail::cat("x ", x.str(), ", w ", w.str(), ", stride ", p.stride_h, "x", p.stride_w, ", pad ", p.pad_h, "x",
                     p.pad_w, ", dilation ", p.dilation_h, "x", p.dilation_w);
}

void refuse(Entry& e, const std::string& what, const std::string& why) {
  e.refused = true;
  e.graph.reset();
  e.reason = why;
  {  // outside the bound from now on (the caller holds e.mu; entry_for never takes it under c.mu)
    Cache& c = per_device<Cache>(e.device);
    std::lock_guard<std::mutex> lock(c.mu);
    c.refused.insert(e.key);
    c.lru.erase(e.key);
  }
  std::fprintf(stderr, "kiln: cuDNN fusion: %s: %s; this shape runs the unfused ops\n", what.c_str(), why.c_str());
}

#define KILN_FE_STEP(call, step)                                              \
  do {                                                                        \
    auto kiln_st_ = (call);                                                   \
    if (kiln_st_.is_bad()) return std::string(step) + ": " + kiln_st_.get_message(); \
  } while (0)

std::string finish(Entry& e, int device, std::shared_ptr<fe::graph::Graph> g);

// Builds the graph into e; returns "" or cuDNN's reason for refusing.
std::string build(Entry& e, int device, const Tensor& x, const Tensor& w, const ops::Conv2dParams& p) {
  const std::string init = init_frontend();
  if (!init.empty()) return init;
  const int64_t n = x.shape()[0], h = x.shape()[1], wd = x.shape()[2], c = x.shape()[3];
  const int64_t k = w.shape()[0], r = w.shape()[1], s = w.shape()[2];
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(x.dtype()))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  // cuDNN's dims are (N, C, H, W) whatever the layout; NHWC is in the strides.
  auto X = g->tensor(fe::graph::Tensor_attributes().set_name("x").set_uid(kX).set_dim({n, c, h, wd}).set_stride(
      {h * wd * c, 1, wd * c, c}));
  auto W = g->tensor(fe::graph::Tensor_attributes().set_name("w").set_uid(kW).set_dim({k, c, r, s}).set_stride(
      {r * s * c, 1, s * c, c}));
  auto S = g->tensor(
      fe::graph::Tensor_attributes().set_name("scale").set_uid(kScale).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}));
  auto B = g->tensor(
      fe::graph::Tensor_attributes().set_name("bias").set_uid(kBias).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}));
  auto scaled = g->pointwise(X, S, fe::graph::Pointwise_attributes().set_name("scale").set_mode(fe::PointwiseMode_t::MUL));
  auto biased =
      g->pointwise(scaled, B, fe::graph::Pointwise_attributes().set_name("bias").set_mode(fe::PointwiseMode_t::ADD));
  auto relu = g->pointwise(biased, fe::graph::Pointwise_attributes().set_name("relu").set_mode(fe::PointwiseMode_t::RELU_FWD));
  auto Y = g->conv_fprop(relu, W,
                         fe::graph::Conv_fprop_attributes()
                             .set_name("conv")
                             .set_padding({p.pad_h, p.pad_w})
                             .set_stride({p.stride_h, p.stride_w})
                             .set_dilation({p.dilation_h, p.dilation_w}));
  Y->set_output(true).set_uid(kY).set_data_type(fe_type(x.dtype()));
  auto [SUM, SQ] = g->genstats(Y, fe::graph::Genstats_attributes().set_name("genstats"));
  SUM->set_output(true).set_uid(kSum).set_data_type(fe::DataType_t::FLOAT);
  SQ->set_output(true).set_uid(kSumSq).set_data_type(fe::DataType_t::FLOAT);
  return finish(e, device, std::move(g));
}

// Validates and builds g's plans into e; "" or cuDNN's reason for refusing.
std::string finish(Entry& e, int device, std::shared_ptr<fe::graph::Graph> g) {
  cudnnHandle_t handle = cudnn_handle(device);
  KILN_FE_STEP(g->validate(), "validate");
  KILN_FE_STEP(g->build_operation_graph(handle), "operation graph");
  KILN_FE_STEP(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "heuristics");
  KILN_FE_STEP(g->check_support(), "support check");
  KILN_FE_STEP(g->build_plans(), "plan build");
  int64_t ws = 0;
  KILN_FE_STEP(g->get_workspace_size(ws), "workspace size");
  e.graph = std::move(g);
  e.workspace = ws;
  e.built = true;
  return "";
}

// Runs the built graph; "" or the failure.
std::string run_fused(Entry& e, int device, const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& w,
                      const ops::Conv2dParams& p, ops::ConvBnStats* out) {
  const Device d = x.device();
  const Shape ys = ops::conv2d_output_shape(x.shape(), w.shape(), p);
  ops::ConvBnStats r{Tensor::empty(ys, x.dtype(), d), Tensor::empty({ys[3]}, DType::f32, d),
                     Tensor::empty({ys[3]}, DType::f32, d)};
  Tensor ws = Tensor::empty({std::max<int64_t>(e.workspace, 1)}, DType::u8, d);
  std::unordered_map<int64_t, void*> pack = {{kX, x.raw_data()},      {kScale, scale.raw_data()}, {kBias, bias.raw_data()},
                                             {kW, w.raw_data()},      {kY, r.y.raw_data()},       {kSum, r.sum.raw_data()},
                                             {kSumSq, r.sumsq.raw_data()}};
  try {
    auto st = e.graph->execute(cudnn_handle(device), pack, ws.raw_data());
    if (st.is_bad()) return "execute: " + st.get_message();
  } catch (const std::exception& ex) {  // the frontend's own exceptions (its dynamic loading)
    return std::string("execute: the frontend threw: ") + ex.what();
  }
  *out = std::move(r);
  return "";
}

// Whether the fused sums agree with the unfused ones: a guard against a wrong engine, not the
// accuracy test (tests/gpu/conv_fusion_test.cpp is). "" or the first channel that disagrees.
std::string compare(const ops::ConvBnStats& f, const ops::ConvBnStats& u, int64_t count) {
  const std::vector<double> fs = f.sum.to_double_vector(), fq = f.sumsq.to_double_vector();
  const std::vector<double> us = u.sum.to_double_vector(), uq = u.sumsq.to_double_vector();
  for (size_t c = 0; c < us.size(); ++c) {
    const double scale_sum = std::sqrt(std::max(uq[c], 0.0) * static_cast<double>(count));  // >= |sum|
    const bool ok = std::isfinite(fs[c]) && std::isfinite(fq[c]) && std::abs(fq[c] - uq[c]) <= 0.05 * uq[c] + 1e-3 &&
                    std::abs(fs[c] - us[c]) <= 0.05 * scale_sum + 1e-3;
    if (!ok)
      return ::kiln::detail::cat("the fused result disagrees with the unfused ops at channel ", c, " (sum ", fs[c], " vs ", us[c],
                         ", sum of squares ", fq[c], " vs ", uq[c], ")");
  }
  return "";
}

// Best of `reps` timed runs of f (after the runs already made), in ms, on the device's stream.
template <typename F>
double time_ms(int device, F&& f, int reps = 3) {
  cudaStream_t s = stream_of(device);
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, static_cast<double>(ms));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

// --- the backward (stage 3) ---------------------------------------------------------------------------

// The (N, C, H, W) tensor of NHWC memory, and (K, C, R, S) of KRSC memory (kiln's (Cout, KH, KW, Cin)).
fe::graph::Tensor_attributes nhwc(const char* name, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, c, h, w}).set_stride(
      {h * w * c, 1, w * c, c});
}

// x * scale + bias in the graph (f32), the (1, C, 1, 1) scale and bias read from kScale and kBias.
std::shared_ptr<fe::graph::Tensor_attributes> affine(fe::graph::Graph& g, std::shared_ptr<fe::graph::Tensor_attributes> X,
                                                     int64_t c) {
  auto S = g.tensor(
      fe::graph::Tensor_attributes().set_name("scale").set_uid(kScale).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}));
  auto B = g.tensor(
      fe::graph::Tensor_attributes().set_name("bias").set_uid(kBias).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}));
  auto scaled =
      g.pointwise(X, S, fe::graph::Pointwise_attributes().set_name("mul_scale").set_mode(fe::PointwiseMode_t::MUL));
  return g.pointwise(scaled, B,
                     fe::graph::Pointwise_attributes().set_name("add_bias").set_mode(fe::PointwiseMode_t::ADD));
}

std::shared_ptr<fe::graph::Graph> new_graph(DType t) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(t))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// dw = conv_wgrad(gy, relu(x*scale + bias)): cuDNN's "scale-bias-ReLU-wgrad" (ConvBNwgrad) pattern.
// The ReLU's output, the convolution's X, is a virtual tensor of x's dtype (as the unfused chain
// rounds a): it never reaches memory.
std::string build_wgrad(Entry& e, int device, const Tensor& gy, const Tensor& x, const Tensor& w,
                        const ops::Conv2dParams& p) {
  const std::string init = init_frontend();
  if (!init.empty()) return init;
  const int64_t n = x.shape()[0], h = x.shape()[1], wd = x.shape()[2], c = x.shape()[3];
  const int64_t k = w.shape()[0], r = w.shape()[1], s = w.shape()[2], oh = gy.shape()[1], ow = gy.shape()[2];
  auto g = new_graph(x.dtype());
  auto X = g->tensor(nhwc("x", kX, n, c, h, wd));
  auto A = g->pointwise(affine(*g, X, c),
                        fe::graph::Pointwise_attributes().set_name("relu").set_mode(fe::PointwiseMode_t::RELU_FWD));
  A->set_data_type(fe_type(x.dtype()));
  auto DY = g->tensor(nhwc("dy", kGy, n, k, oh, ow));
  auto DW = g->conv_wgrad(DY, A,
                          fe::graph::Conv_wgrad_attributes()
                              .set_name("wgrad")
                              .set_padding({p.pad_h, p.pad_w})
                              .set_stride({p.stride_h, p.stride_w})
                              .set_dilation({p.dilation_h, p.dilation_w}));
  DW->set_output(true).set_uid(kDw).set_dim({k, c, r, s}).set_stride({r * s * c, 1, s * c, c}).set_data_type(
      fe_type(x.dtype()));
  return finish(e, device, std::move(g));
}

// da_m = relu_bwd(conv_dgrad(gy, w), x*scale + bias): cuDNN's "dgrad + dReLU" pattern, the
// pre-activation recomputed in the graph (f32); da_m written in x's dtype (as the unfused chain's da).
std::string build_dgrad(Entry& e, int device, const Tensor& gy, const Tensor& x, const Tensor& w,
                        const ops::Conv2dParams& p) {
  const std::string init = init_frontend();
  if (!init.empty()) return init;
  const int64_t n = x.shape()[0], h = x.shape()[1], wd = x.shape()[2], c = x.shape()[3];
  const int64_t k = w.shape()[0], r = w.shape()[1], s = w.shape()[2], oh = gy.shape()[1], ow = gy.shape()[2];
  auto g = new_graph(x.dtype());
  auto DY = g->tensor(nhwc("dy", kGy, n, k, oh, ow));
  auto W = g->tensor(fe::graph::Tensor_attributes().set_name("w").set_uid(kW).set_dim({k, c, r, s}).set_stride(
      {r * s * c, 1, s * c, c}));
  auto DG = g->conv_dgrad(DY, W,
                          fe::graph::Conv_dgrad_attributes()
                              .set_name("dgrad")
                              .set_padding({p.pad_h, p.pad_w})
                              .set_stride({p.stride_h, p.stride_w})
                              .set_dilation({p.dilation_h, p.dilation_w}));
  DG->set_dim({n, c, h, wd});  // (a strided dgrad cannot infer its output's size)
  auto X = g->tensor(nhwc("x", kX, n, c, h, wd));
  auto DA = g->pointwise(DG, affine(*g, X, c),
                         fe::graph::Pointwise_attributes().set_name("drelu").set_mode(fe::PointwiseMode_t::RELU_BWD));
  DA->set_output(true).set_uid(kDa).set_dim({n, c, h, wd}).set_stride({h * wd * c, 1, wd * c, c}).set_data_type(
      fe_type(x.dtype()));
  return finish(e, device, std::move(g));
}

// Runs e's built graph on the variant pack; "" or the failure.
std::string execute(Entry& e, int device, const Device& d, std::unordered_map<int64_t, void*>& pack) {
  Tensor ws = Tensor::empty({std::max<int64_t>(e.workspace, 1)}, DType::u8, d);
  try {
    auto st = e.graph->execute(cudnn_handle(device), pack, ws.raw_data());
    if (st.is_bad()) return "execute: " + st.get_message();
  } catch (const std::exception& ex) {  // the frontend's own exceptions (its dynamic loading)
    return std::string("execute: the frontend threw: ") + ex.what();
  }
  return "";
}

// dx = da*scale[c] (x's dtype), and the per-channel partial sums of da*x and da (f32) of one block of
// rows: threadIdx.x a channel of a 32-channel tile (coalesced), threadIdx.y every 8th row of the
// block's `rows_per_block` rows. part: (blocks, 2, C).
constexpr int kTileC = 32, kTileR = 8;

template <typename T>
__global__ void affine_grads_partial(const T* __restrict__ da, const T* __restrict__ x, const T* __restrict__ scale,
                                     T* __restrict__ dx, float* __restrict__ part, int64_t rows, int64_t C,
                                     int64_t rows_per_block) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTileC + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < rows ? r0 + rows_per_block : rows;
  float ss = 0.f, sb = 0.f;
  if (c < C) {
    const float sc = to_float(scale[c]);
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileR) {
      const int64_t i = r * C + c;
      const float g = to_float(da[i]);
      dx[i] = from_float<T>(g * sc);
      ss += g * to_float(x[i]);
      sb += g;
    }
  }
  __shared__ float sh[2][kTileR][kTileC];
  sh[0][threadIdx.y][threadIdx.x] = ss;
  sh[1][threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float a = 0.f, b = 0.f;
    for (int j = 0; j < kTileR; ++j) {
      a += sh[0][j][threadIdx.x];
      b += sh[1][j][threadIdx.x];
    }
    part[static_cast<int64_t>(blockIdx.y) * 2 * C + c] = a;
    part[static_cast<int64_t>(blockIdx.y) * 2 * C + C + c] = b;
  }
}

// The partials summed in a fixed order (the same result every run, unlike atomics).
__global__ void affine_grads_sum(const float* __restrict__ part, float* __restrict__ dscale, float* __restrict__ dbias,
                                 int64_t blocks, int64_t C) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float a = 0.f, b = 0.f;
  for (int64_t j = 0; j < blocks; ++j) {
    a += part[j * 2 * C + c];
    b += part[j * 2 * C + C + c];
  }
  dscale[c] = a;
  dbias[c] = b;
}

// dx, dscale and dbias (x's dtype) from da_m in one pass over da_m and x (plus a pass over the
// (blocks, 2, C) partials); sums accumulated in f32.
ops::ConvBnGrads affine_grads(int device, const Tensor& da, const Tensor& x, const Tensor& scale) {
  const Device d = x.device();
  const DType dt = x.dtype();
  const int64_t C = x.shape()[3], rows = x.numel() / C;
  const int64_t rows_per_block = std::max<int64_t>(256, (rows + 65534) / 65535);  // gridDim.y <= 65535
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  ops::ConvBnGrads g;
  g.dx = Tensor::empty(x.shape(), dt, d);
  Tensor part = Tensor::empty({blocks, 2, C}, DType::f32, d);
  Tensor ds = Tensor::empty({C}, DType::f32, d), db = Tensor::empty({C}, DType::f32, d);
  cudaStream_t s = stream_of(device);
  dispatch_float(dt, "conv_scale_bias_relu_stats backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid(static_cast<unsigned>((C + kTileC - 1) / kTileC), static_cast<unsigned>(blocks));
    affine_grads_partial<T><<<grid, dim3(kTileC, kTileR), 0, s>>>(
        static_cast<const T*>(da.raw_data()), static_cast<const T*>(x.raw_data()), static_cast<const T*>(scale.raw_data()),
        static_cast<T*>(g.dx.raw_data()), part.data<float>(), rows, C, rows_per_block);
  });
  CUDA_CHECK_LAUNCH();
  affine_grads_sum<<<static_cast<unsigned>((C + 255) / 256), 256, 0, s>>>(part.data<float>(), ds.data<float>(),
                                                                           db.data<float>(), blocks, C);
  CUDA_CHECK_LAUNCH();
  g.dscale = dt == DType::f32 ? ds : ds.to(dt);
  g.dbias = dt == DType::f32 ? db : db.to(dt);
  return g;
}

double rel_l2_error(const std::vector<double>& f, const std::vector<double>& u, double* norm) {
  double e = 0, n = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    e += (f[i] - u[i]) * (f[i] - u[i]);
    n += u[i] * u[i];
  }
  *norm = std::sqrt(n);
  return std::sqrt(e);
}

// The guard against a wrong engine for dw: relative L2 error within 5%. "" or the disagreement.
std::string compare_dw(const Tensor& f, const Tensor& u) {
  double norm = 0;
  const std::vector<double> fv = f.to_double_vector();
  const double err = rel_l2_error(fv, u.to_double_vector(), &norm);
  for (double v : fv)
    if (!std::isfinite(v)) return "the fused dw has non-finite values";
  if (!(err <= 0.05 * norm + 1e-3))
    return ::kiln::detail::cat("the fused dw disagrees with the unfused ops (L2 error ", err, " of a norm ", norm, ")");
  return "";
}

// The dgrad side's fused result: the gradients and da_m (for the guard).
struct DgradOut {
  ops::ConvBnGrads g;
  Tensor da;
};

// The guard for the dgrad side: dx's relative L2 error within 20% (da_m checked through it; the graph's
// ReLU mask is of the pre-activation in f32, the unfused chain's of it rounded to the dtype, so in bf16
// about 0.1% of the elements, those within a rounding of 0, differ by their whole value: a few percent
// of the norm; a wrong engine is off by 100%), and each channel's dscale and dbias within 5% of the sums
// of |da_m * x| and |da_m| (the largest they can be).
std::string compare_dgrad(const DgradOut& f, const ops::ConvBnGrads& u, const Tensor& x) {
  double norm = 0;
  const std::vector<double> fdx = f.g.dx.to_double_vector();
  for (double v : fdx)
    if (!std::isfinite(v)) return "the fused dx has non-finite values";
  const double err = rel_l2_error(fdx, u.dx.to_double_vector(), &norm);
  if (!(err <= 0.2 * norm + 1e-3))
    return ::kiln::detail::cat("the fused dx disagrees with the unfused ops (L2 error ", err, " of a norm ", norm, ")");
  const std::vector<double> da = f.da.to_double_vector(), xv = x.to_double_vector();
  const size_t C = static_cast<size_t>(x.shape()[3]);
  std::vector<double> bound_s(C, 0.0), bound_b(C, 0.0);
  for (size_t i = 0; i < da.size(); ++i) {
    bound_s[i % C] += std::abs(da[i] * xv[i]);
    bound_b[i % C] += std::abs(da[i]);
  }
  const std::vector<double> fs = f.g.dscale.to_double_vector(), fb = f.g.dbias.to_double_vector();
  const std::vector<double> us = u.dscale.to_double_vector(), ub = u.dbias.to_double_vector();
  for (size_t c = 0; c < C; ++c)
    if (!(std::abs(fs[c] - us[c]) <= 0.05 * bound_s[c] + 1e-3 && std::abs(fb[c] - ub[c]) <= 0.05 * bound_b[c] + 1e-3))
      return ::kiln::detail::cat("the fused dscale/dbias disagree with the unfused ops at channel ", c, " (", fs[c], " vs ",
                                 us[c], ", ", fb[c], " vs ", ub[c], ")");
  return "";
}

// Whether e is settled on the unfused ops (refused, or timed slower); fills `how` if so.
bool settled_unfused(Entry& e, FusionMode mode, ops::ConvFusionChoice* how) {
  std::lock_guard<std::mutex> lock(e.mu);
  const bool settled = e.refused || (mode == FusionMode::automatic && e.timed && !e.fused_faster);
  if (settled && how) *how = ops::ConvFusionChoice{false, e.refused ? "refused: " + e.reason : "timed", e.fused_ms, e.unfused_ms};
  return settled;
}

// One backward graph's choice, as the forward's: first sight builds, runs both, compares; the timed
// mode times both once (best of 3) and keeps the faster; force fuses wherever built and agreeing.
// `build()` -> "" or why not; `run(Out*)` -> "" or why not; `unfused()` -> the unfused ops' Out (for the
// first-sight comparison, `reference()`, which may compute more); `compare(fused, reference)` -> "" or
// the disagreement. Returns the result (fused or not) in *out, and whether it is the fused one.
template <typename Out, typename Ref, typename Build, typename Run, typename Unfused, typename Reference,
          typename Compare, typename FromRef>
bool choose(Entry& e, FusionMode mode, const std::string& what, Build&& build, Run&& run, Unfused&& unfused,
            Reference&& reference, Compare&& compare, FromRef&& from_ref, Out* out, ops::ConvFusionChoice* how) {
  std::lock_guard<std::mutex> lock(e.mu);
  auto fill = [&](bool fused, std::string why) {
    if (how) *how = ops::ConvFusionChoice{fused, std::move(why), e.fused_ms, e.unfused_ms};
  };
  auto refused = [&](const std::string& why) {
    refuse(e, what, why);
    fill(false, "refused: " + e.reason);
  };
  if (e.refused) {
    fill(false, "refused: " + e.reason);
    *out = unfused();
    return false;
  }
  Out fused_out;
  bool have_fused = false;
  if (!e.built) {
    std::string err;
    try {
      err = build();
    } catch (const std::exception& ex) {  // the frontend's own exceptions (its dynamic loading)
      err = std::string("the frontend threw: ") + ex.what();
    }
    if (err.empty()) err = run(&fused_out);
    if (!err.empty()) {
      refused(err);
      *out = unfused();
      return false;
    }
    const Ref ref = reference();
    err = compare(fused_out, ref);
    if (!err.empty()) {
      refused(err);
      *out = from_ref(ref);
      return false;
    }
    have_fused = true;
  }
  if (mode == FusionMode::automatic && !e.timed) {
    std::string err;
    e.fused_ms = time_ms(e.device, [&] {
      if (err.empty()) err = run(&fused_out);
    });
    if (!err.empty()) {
      refused(err);
      *out = unfused();
      return false;
    }
    e.unfused_ms = time_ms(e.device, [&] { (void)unfused(); });
    e.timed = true;
    e.fused_faster = e.fused_ms < e.unfused_ms;
    fill(e.fused_faster, "timed");
    *out = e.fused_faster ? fused_out : unfused();
    return e.fused_faster;
  }
  if (mode == FusionMode::automatic && !e.fused_faster) {
    fill(false, "timed");
    *out = unfused();
    return false;
  }
  if (!have_fused) {
    const std::string err = run(&fused_out);
    if (!err.empty()) {
      refused(err);
      *out = unfused();
      return false;
    }
  }
  fill(true, mode == FusionMode::force ? "KILN_CUDNN_FUSION=force" : "timed");
  *out = fused_out;
  return true;
}

// One backward of conv_scale_bias_relu_stats (conv_bn_stats_backward): its inputs, where it runs, and
// its unfused chain.
struct BackwardCase {
  const Tensor &gy, &x, &scale, &bias, &w;
  const ops::Conv2dParams& p;
  int device;
  Device d;
  const ConvFusionBackwardUnfused& unfused;
};

// dw through the fused wgrad graph of `e` (the scale-bias-ReLU prologue inside) or the unfused chain,
// as choose() decides in `mode`; `what` is the shape (shape_text), for messages.
Tensor backward_dw(Entry& e, FusionMode mode, const std::string& what, const BackwardCase& c,
                   ops::ConvFusionChoice* how) {
  const Tensor &gy = c.gy, &x = c.x, &scale = c.scale, &bias = c.bias, &w = c.w;
  const ops::Conv2dParams& p = c.p;
  const int device = c.device;
  const Device& d = c.d;
  Tensor result;
  const ops::ConvFusionNeeds only_w{false, false, false, true};
  auto unfused_dw = [&] { return c.unfused(only_w).dw; };
  choose<Tensor, Tensor>(
      e, mode, "wgrad of " + what, [&] { return build_wgrad(e, device, gy, x, w, p); },
      [&](Tensor* dw) {
        Tensor r = Tensor::empty(w.shape(), w.dtype(), d);
        std::unordered_map<int64_t, void*> pack = {{kX, x.raw_data()},
                                                   {kScale, scale.raw_data()},
                                                   {kBias, bias.raw_data()},
                                                   {kGy, gy.raw_data()},
                                                   {kDw, r.raw_data()}};
        const std::string err = execute(e, device, d, pack);
        if (err.empty()) *dw = r;
        return err;
      },
      unfused_dw, unfused_dw, [](const Tensor& f, const Tensor& u) { return compare_dw(f, u); },
      [](const Tensor& u) { return u; }, &result, how);
  return result;
}

// dx, dscale, dbias (those `need` asks for) through the fused dgrad + dReLU graph of `e` and kiln's
// dx/dscale/dbias pass, or the unfused chain, as choose() decides in `mode`.
ops::ConvBnGrads backward_activation(Entry& e, FusionMode mode, const std::string& what, const BackwardCase& c,
                                     const ops::ConvFusionNeeds& need, ops::ConvFusionChoice* how) {
  const Tensor &gy = c.gy, &x = c.x, &scale = c.scale, &bias = c.bias, &w = c.w;
  const ops::Conv2dParams& p = c.p;
  const int device = c.device;
  const Device& d = c.d;
  const ops::ConvFusionNeeds act{need.x, need.scale, need.bias, false};
  auto unfused_act = [&] {
    DgradOut o;
    o.g = c.unfused(act);
    return o;
  };
  DgradOut got;
  choose<DgradOut, ops::ConvBnGrads>(
      e, mode, "dgrad + ReLU backward of " + what, [&] { return build_dgrad(e, device, gy, x, w, p); },
      [&](DgradOut* o) {
        Tensor da = Tensor::empty(x.shape(), x.dtype(), d);
        std::unordered_map<int64_t, void*> pack = {{kGy, gy.raw_data()},       {kW, w.raw_data()},
                                                   {kX, x.raw_data()},         {kScale, scale.raw_data()},
                                                   {kBias, bias.raw_data()},   {kDa, da.raw_data()}};
        const std::string err = execute(e, device, d, pack);
        if (!err.empty()) return err;
        o->g = affine_grads(device, da, x, scale);
        o->da = da;
        return std::string();
      },
      unfused_act,
      // the first-sight reference has every dgrad-side gradient, whatever was asked for
      [&] { return c.unfused(ops::ConvFusionNeeds{true, true, true, false}); },
      [&](const DgradOut& f, const ops::ConvBnGrads& u) { return compare_dgrad(f, u, x); },
      [](const ops::ConvBnGrads& u) {
        DgradOut o;
        o.g = u;
        return o;
      },
      &got, how);
  return got.g;
}
#endif  // KILN_CUDNN_FRONTEND

ops::ConvBnStats unfused_because(const ConvFusionUnfused& unfused, ops::ConvFusionChoice* how, std::string why) {
  if (how) {
    how->fused = false;
    how->why = std::move(why);
  }
  return unfused();
}

}  // namespace

ops::ConvBnStats conv_bn_stats_forward(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& w,
                                       const ops::Conv2dParams& p, const ConvFusionUnfused& unfused,
                                       ops::ConvFusionChoice* how) {
  const FusionMode mode = fusion_mode();
  if (mode == FusionMode::off) return unfused_because(unfused, how, "KILN_CUDNN_FUSION=0");
#if !KILN_CUDNN_FRONTEND
  return unfused_because(unfused, how, "built without cuDNN's frontend headers (KILN_CUDNN_FRONTEND_DIR)");
#else
  const int device = checked_index(x.device(), "conv_scale_bias_relu_stats");
  DeviceGuard guard(device);
  const Key key = make_key(Kind::fprop, x, w, p);
  const std::shared_ptr<Entry> held = entry_for(device, key);
  Entry& e = *held;
  std::lock_guard<std::mutex> lock(e.mu);
  auto fill = [&](bool fused, std::string why) {
    if (how) *how = ops::ConvFusionChoice{fused, std::move(why), e.fused_ms, e.unfused_ms};
  };
  if (e.refused) {
    fill(false, "refused: " + e.reason);
    return unfused();
  }
  const std::string what = shape_text(x, w, p);
  ops::ConvBnStats out, ref;
  if (!e.built) {
    // First sight of the shape: build, run both once, compare.
    std::string err;
    try {
      err = build(e, device, x, w, p);
    } catch (const std::exception& ex) {  // the frontend's own exceptions (its dynamic loading)
      err = std::string("the frontend threw: ") + ex.what();
    }
    // (outside the try: an out-of-memory error of kiln's allocator propagates as from any op)
    if (err.empty()) err = run_fused(e, device, x, scale, bias, w, p, &out);
    if (!err.empty()) {
      refuse(e, what, err);
      fill(false, "refused: " + e.reason);
      return unfused();
    }
    ref = unfused();
    const Shape ys = ops::conv2d_output_shape(x.shape(), w.shape(), p);
    err = compare(out, ref, ys[0] * ys[1] * ys[2]);
    if (!err.empty()) {
      refuse(e, what, err);
      fill(false, "refused: " + e.reason);
      return ref;
    }
  }
  if (mode == FusionMode::automatic && !e.timed) {
    std::string err;
    e.fused_ms = time_ms(device, [&] {
      if (err.empty()) err = run_fused(e, device, x, scale, bias, w, p, &out);
    });
    if (!err.empty()) {
      refuse(e, what, err);
      fill(false, "refused: " + e.reason);
      return unfused();
    }
    e.unfused_ms = time_ms(device, [&] { (void)unfused(); });
    e.timed = true;
    e.fused_faster = e.fused_ms < e.unfused_ms;
    fill(e.fused_faster, "timed");
    if (e.fused_faster) return out;
    return ref.y.defined() ? ref : unfused();  // the first-sight run's unfused result, when there is one
  }
  if (mode == FusionMode::automatic && !e.fused_faster) {
    fill(false, "timed");
    return unfused();
  }
  if (out.y.defined()) {  // the first-sight run above, in force mode
    fill(true, "KILN_CUDNN_FUSION=force");
    return out;
  }
  std::string err = run_fused(e, device, x, scale, bias, w, p, &out);
  if (!err.empty()) {
    refuse(e, what, err);
    fill(false, "refused: " + e.reason);
    return unfused();
  }
  fill(true, mode == FusionMode::force ? "KILN_CUDNN_FUSION=force" : "timed");
  return out;
#endif
}

ops::ConvBnGrads conv_bn_stats_backward(const Tensor& gy, const Tensor& x, const Tensor& scale, const Tensor& bias,
                                        const Tensor& w, const ops::Conv2dParams& p, const ops::ConvFusionNeeds& need,
                                        const ConvFusionBackwardUnfused& unfused, ops::ConvFusionBackwardChoice* how) {
  auto why_both = [&](const std::string& why) {
    if (!how) return;
    if (need.act()) how->dgrad = ops::ConvFusionChoice{false, why};
    if (need.w) how->wgrad = ops::ConvFusionChoice{false, why};
  };
  const FusionMode mode = fusion_mode();
  if (mode == FusionMode::off) {
    why_both("KILN_CUDNN_FUSION=0");
    return unfused(need);
  }
#if !KILN_CUDNN_FRONTEND
  why_both("built without cuDNN's frontend headers (KILN_CUDNN_FRONTEND_DIR)");
  return unfused(need);
#else
  const int device = checked_index(x.device(), "conv_scale_bias_relu_stats backward");
  DeviceGuard guard(device);
  const Device d = x.device();
  const std::shared_ptr<Entry> ew = need.w ? entry_for(device, make_key(Kind::wgrad, x, w, p)) : nullptr;
  const std::shared_ptr<Entry> ed = need.act() ? entry_for(device, make_key(Kind::dgrad_drelu, x, w, p)) : nullptr;
  // Every side asked for settled on the unfused ops: one call of the unfused chain does both.
  const bool w_unfused = !ew || settled_unfused(*ew, mode, how ? &how->wgrad : nullptr);
  const bool d_unfused = !ed || settled_unfused(*ed, mode, how ? &how->dgrad : nullptr);
  if (w_unfused && d_unfused) return unfused(need);
  const std::string what = shape_text(x, w, p);
  const BackwardCase c{gy, x, scale, bias, w, p, device, d, unfused};
  ops::ConvBnGrads out;
  if (ew) out.dw = backward_dw(*ew, mode, what, c, how ? &how->wgrad : nullptr);
  if (ed) {
    const ops::ConvBnGrads g = backward_activation(*ed, mode, what, c, need, how ? &how->dgrad : nullptr);
    out.dx = g.dx;
    out.dscale = g.dscale;
    out.dbias = g.dbias;
  }
  return out;
#endif
}

}  // namespace kiln::cuda
