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
// experimental NVRTC engines add no link dependency. Tests: tests/gpu/conv_fusion_test.cpp.
#include <cstdio>
#include <cstdlib>
#include <cstring>  // the frontend uses std::strlen without including it when its JSON support is off
#include <map>
#include <mutex>
#include <string>

#include "core/cuda/cuda_ops.h"
#include "core/cuda/runtime.h"
#include "core/ops/conv_fusion.h"

#if KILN_CUDNN_FRONTEND
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
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

// N, H, W, Cin, Cout, KH, KW, stride h/w, pad h/w, dilation h/w, dtype
using Key = std::array<int64_t, 14>;

enum Uid : int64_t { kX = 1, kScale, kBias, kW, kY, kSum, kSumSq };

struct Entry {
  std::shared_ptr<fe::graph::Graph> graph;  // null until built; null for good when refused
  bool built = false, refused = false, timed = false, fused_faster = false;
  std::string reason;  // why refused
  int64_t workspace = 0;
  double fused_ms = -1, unfused_ms = -1;
  std::mutex mu;  // one thread builds or times a shape
};

struct Cache {
  std::mutex mu;
  std::map<Key, std::unique_ptr<Entry>> entries;
};

Entry& entry_for(int device, const Key& k) {
  Cache& c = per_device<Cache>(device);
  std::lock_guard<std::mutex> lock(c.mu);
  auto& e = c.entries[k];
  if (!e) e = std::make_unique<Entry>();
  return *e;
}

std::string shape_text(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p) {
  return ::kiln::detail::cat("x ", x.str(), ", w ", w.str(), ", stride ", p.stride_h, "x", p.stride_w, ", pad ", p.pad_h, "x",
                     p.pad_w, ", dilation ", p.dilation_h, "x", p.dilation_w);
}

void refuse(Entry& e, const std::string& what, const std::string& why) {
  e.refused = true;
  e.graph.reset();
  e.reason = why;
  std::fprintf(stderr, "kiln: cuDNN fusion: %s: %s; this shape runs the unfused ops\n", what.c_str(), why.c_str());
}

#define KILN_FE_STEP(call, step)                                              \
  do {                                                                        \
    auto kiln_st_ = (call);                                                   \
    if (kiln_st_.is_bad()) return std::string(step) + ": " + kiln_st_.get_message(); \
  } while (0)

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
  const Key key{x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], w.shape()[0], w.shape()[1], w.shape()[2],
                p.stride_h,  p.stride_w,  p.pad_h,      p.pad_w,      p.dilation_h, p.dilation_w,
                static_cast<int64_t>(x.dtype())};
  Entry& e = entry_for(device, key);
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

}  // namespace kiln::cuda
