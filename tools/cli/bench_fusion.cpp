// `kiln bench bn_relu` and `kiln bench conv_fusion`: the fused kernels of a ResNet block timed against
// what they replace (the command table and the shared helpers: tools/cli/bench.cpp, bench_util.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops/batch_norm.h"
#include "core/ops/conv_fusion.h"
#include "core/ops/elementwise.h"
#include "core/rng.h"
#include "tools/cli/bench_util.h"
#include "tools/cli/kv_args.h"

namespace kiln::cli {

// `kiln bench bn_relu`: the fused batch norm + ReLU backward (core/ops/batch_norm.h's
// batch_norm_relu_backward) against what it replaces, relu_backward then batch_norm_backward, the
// two alternating in every iteration (medians; on a shared machine the speed drifts).
int bench_bn_relu(const Args& in) {
  static const char* kUsage =
      "usage: kiln bench bn_relu [batch=128] [size=32] [channels=64] [iters=30] [device=cpu|0|cuda:N]\n"
      "  the batch norm + (residual add +) ReLU backward, fused against relu_backward + batch_norm_backward,\n"
      "  on x (batch, size, size, channels), fp32 and bf16, with and without a residual\n";
  if (wants_help(in, kUsage)) return 0;
  Args args = in;
  std::vector<Device> devices = bench_devices(args);
  auto a = parse_int_args("bench bn_relu", args, {{"batch", 128}, {"size", 32}, {"channels", 64}, {"iters", 30}});
  const Shape s{a["batch"], a["size"], a["size"], a["channels"]};
  const int64_t C = s.back();
  std::printf("# kiln bench bn_relu: x %s, training; %lld alternating iterations, medians; threads %d\n",
              shape_str(s).c_str(), static_cast<long long>(a["iters"]), omp_get_max_threads());
  std::printf("%-7s %-5s %-9s %14s %10s %8s\n", "device", "dtype", "residual", "separate ms", "fused ms", "speedup");
  for (const Device& d : devices) {
    for (DType t : {DType::f32, DType::bf16}) {
      for (bool res : {false, true}) {
        Generator gen(3);
        Tensor x = rand_normal(s, 0, 1, t, d, &gen), r = rand_normal(s, 0, 1, t, d, &gen);
        Tensor gy = rand_normal(s, 0, 1, t, d, &gen), g = rand_normal({C}, 1, 0.1, DType::f32, d, &gen);
        Tensor b = rand_normal({C}, 0, 0.1, DType::f32, d, &gen), sm, si;
        std::shared_ptr<void> saved;
        Tensor y = batch_norm_relu_forward_kernel.get(d)(x, g, b, Tensor(), Tensor(), true, 0.1, 1e-5, res ? r : Tensor(),
                                                         &sm, &si, &saved);
        std::vector<double> sep, fused;
        for (int64_t i = 0; i < a["iters"] + 2; ++i) {  // the first two untimed
          BatchNormGradients out;
          const double ms_sep = time_ms([&] {
            Tensor m = binary_kernel.get(d)(ElementwiseBinary::relu_backward, gy, y);
            out = batch_norm_backward_kernel.get(d)(m, x, g, sm, si, saved, true, true);
          }, [&] { sync_on(out.dx); }, 0, 1);
          const double ms_fused = time_ms([&] {
            out = batch_norm_relu_backward_kernel.get(d)(gy, y, x, g, b, sm, si, saved, true, true, res);
          }, [&] { sync_on(out.dx); }, 0, 1);
          if (i < 2) continue;
          sep.push_back(ms_sep);
          fused.push_back(ms_fused);
        }
        std::sort(sep.begin(), sep.end());
        std::sort(fused.begin(), fused.end());
        const double ms = sep[sep.size() / 2], mf = fused[fused.size() / 2];
        std::printf("%-7s %-5s %-9s %14.3f %10.3f %8.2f\n", d.str().c_str(), t == DType::f32 ? "fp32" : "bf16",
                    res ? "yes" : "no", ms, mf, ms / mf);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

namespace {

// A convolution shape of ResNet-50 (224x224 input): H = W of the input, Cin, Cout, kernel, stride, and
// how many of the 48 bottleneck convolutions have it.
struct ConvShape {
  int64_t hw, cin, cout, k, stride, count;
};
const std::vector<ConvShape> kResNet50ConvShapes = {
    {56, 64, 64, 1, 1, 1},     {56, 64, 64, 3, 1, 3},    {56, 64, 256, 1, 1, 3},   {56, 256, 64, 1, 1, 2},
    {56, 256, 128, 1, 1, 1},   {56, 128, 128, 3, 2, 1},  {28, 128, 512, 1, 1, 4},  {28, 512, 128, 1, 1, 3},
    {28, 128, 128, 3, 1, 3},   {28, 512, 256, 1, 1, 1},  {28, 256, 256, 3, 2, 1},  {14, 256, 1024, 1, 1, 6},
    {14, 1024, 256, 1, 1, 5},  {14, 256, 256, 3, 1, 5},  {14, 1024, 512, 1, 1, 1}, {14, 512, 512, 3, 2, 1},
    {7, 512, 2048, 1, 1, 3},   {7, 2048, 512, 1, 1, 2},  {7, 512, 512, 3, 1, 2}};

void set_fusion_mode(const char* v) { setenv("KILN_CUDNN_FUSION", v, 1); }

// One shape's inputs: y = conv(relu(x * sc + bi), w) with the parameters p; `iters` timed iterations.
struct ConvCase {
  Tensor x, sc, bi, w;
  ops::Conv2dParams p;
  int64_t iters = 0;
};

// The forward, fused (-1 where it cannot be forced) and unfused, and the first sight's choice; `y` is
// its output (the backward's dy takes its shape).
struct ForwardTimes {
  double fused_ms = -1, unfused_ms = 0;
  ops::ConvFusionChoice how;
  Tensor y;
};
ForwardTimes time_forward(const ConvCase& c) {
  ForwardTimes f;
  NoGradGuard ng;
  ops::ConvFusionChoice forced;
  ops::ConvBnStats r;
  set_fusion_mode("1");
  r = ops::conv_scale_bias_relu_stats(c.x, c.sc, c.bi, c.w, c.p, &f.how);  // first sight: build, check, time, choose
  set_fusion_mode("force");
  r = ops::conv_scale_bias_relu_stats(c.x, c.sc, c.bi, c.w, c.p, &forced);
  if (forced.fused)
    f.fused_ms = time_ms([&] { r = ops::conv_scale_bias_relu_stats(c.x, c.sc, c.bi, c.w, c.p); },
                         [&] { sync_on(r.sumsq); }, 3, c.iters);
  set_fusion_mode("0");
  f.unfused_ms = time_ms([&] { r = ops::conv_scale_bias_relu_stats(c.x, c.sc, c.bi, c.w, c.p); },
                         [&] { sync_on(r.sumsq); }, 3, c.iters);
  f.y = r.y;
  return f;
}

// The backward (every gradient, from `gy`): with the fused graphs forced (-1 where none can be), with
// the first sight's choices, and unfused.
struct BackwardTimes {
  double fused_ms = -1, chosen_ms = 0, unfused_ms = 0;
  ops::ConvFusionBackwardChoice how, forced;
};
BackwardTimes time_backward(const ConvCase& c, const Tensor& gy) {
  BackwardTimes b;
  NoGradGuard ng;
  const ops::ConvFusionNeeds all{true, true, true, true};
  ops::ConvBnGrads g;
  auto backward = [&] { g = ops::conv_scale_bias_relu_backward(gy, c.x, c.sc, c.bi, c.w, c.p, all); };
  set_fusion_mode("1");
  g = ops::conv_scale_bias_relu_backward(gy, c.x, c.sc, c.bi, c.w, c.p, all, &b.how);  // first sight: the timed choices
  set_fusion_mode("force");
  g = ops::conv_scale_bias_relu_backward(gy, c.x, c.sc, c.bi, c.w, c.p, all, &b.forced);
  if (b.forced.dgrad.fused || b.forced.wgrad.fused) b.fused_ms = time_ms(backward, [&] { sync_on(g.dx); }, 3, c.iters);
  set_fusion_mode("1");  // the choices made above
  b.chosen_ms = time_ms(backward, [&] { sync_on(g.dx); }, 3, c.iters);
  set_fusion_mode("0");
  b.unfused_ms = time_ms(backward, [&] { sync_on(g.dx); }, 3, c.iters);
  return b;
}

// "56x56x64 3x3/1 ->64"
std::string shape_name(const ConvShape& c) {
  char name[64];
  std::snprintf(name, sizeof name, "%lldx%lldx%lld %lldx%lld/%lld ->%lld", static_cast<long long>(c.hw),
                static_cast<long long>(c.hw), static_cast<long long>(c.cin), static_cast<long long>(c.k),
                static_cast<long long>(c.k), static_cast<long long>(c.stride), static_cast<long long>(c.cout));
  return name;
}

// One row of the table: a shape's timings, the choices, and why a graph was not fused.
void print_fusion_row(const Device& d, const ConvShape& c, const ForwardTimes& f, const BackwardTimes& b) {
  char fms[16] = "-", sp[16] = "-", bfms[16] = "-", bsp[16] = "-";
  if (f.fused_ms > 0) {
    std::snprintf(fms, sizeof fms, "%.3f", f.fused_ms);
    std::snprintf(sp, sizeof sp, "%.2f", f.unfused_ms / f.fused_ms);
  }
  if (b.fused_ms > 0) {
    std::snprintf(bfms, sizeof bfms, "%.3f", b.fused_ms);
    std::snprintf(bsp, sizeof bsp, "%.2f", b.unfused_ms / b.fused_ms);
  }
  std::string bchosen = std::string(b.how.dgrad.fused ? "d" : "") + (b.how.wgrad.fused ? "w" : "");
  if (bchosen.empty()) bchosen = "unfused";
  std::string note = f.how.why == "timed" ? "" : "fwd " + f.how.why;
  for (const auto* h : {&b.forced.dgrad, &b.forced.wgrad})
    if (!h->fused) note += std::string(note.empty() ? "" : "; ") + (h == &b.forced.dgrad ? "dgrad " : "wgrad ") + h->why;
  std::printf("%-7s %-30s %5lld %10s %11.3f %8s %-8s %10s %11.3f %8s %-8s %s\n", d.str().c_str(),
              shape_name(c).c_str(), static_cast<long long>(c.count), fms, f.unfused_ms, sp,
              f.how.fused ? "fused" : "unfused", bfms, b.unfused_ms, bsp, bchosen.c_str(), note.c_str());
}

// Every shape on GPU `d`, a row each, then the totals over the 48 convolutions; 1 when a shape failed.
int bench_conv_fusion_on(const Device& d, int64_t batch, DType t, int64_t iters) {
  int rc = 0;
  double total_unfused = 0, total_chosen = 0, total_bwd_unfused = 0, total_bwd_chosen = 0;
  for (const ConvShape& c : kResNet50ConvShapes) {
    Generator gen(7);
    ConvCase cc;
    cc.x = rand_normal({batch, c.hw, c.hw, c.cin}, 0, 1, t, d, &gen);
    cc.sc = rand_normal({c.cin}, 1, 0.25, t, d, &gen);
    cc.bi = rand_normal({c.cin}, 0, 0.5, t, d, &gen);
    cc.w = rand_normal({c.cout, c.k, c.k, c.cin}, 0, 1.0 / std::sqrt(double(c.cin * c.k * c.k)), t, d, &gen);
    cc.p.stride_h = cc.p.stride_w = c.stride;
    cc.p.pad_h = cc.p.pad_w = c.k / 2;
    cc.iters = iters;
    try {
      const ForwardTimes f = time_forward(cc);
      total_unfused += f.unfused_ms * double(c.count);
      total_chosen += (f.how.fused && f.fused_ms > 0 ? f.fused_ms : f.unfused_ms) * double(c.count);
      const Tensor gy = rand_normal(f.y.shape(), 0, 1, t, d, &gen);
      const BackwardTimes b = time_backward(cc, gy);
      total_bwd_unfused += b.unfused_ms * double(c.count);
      total_bwd_chosen += b.chosen_ms * double(c.count);
      print_fusion_row(d, c, f, b);
    } catch (const Error& e) {
      std::printf("# %s on %s skipped: %s\n", shape_name(c).c_str(), d.str().c_str(), e.what());
      rc = 1;
    }
    std::fflush(stdout);
  }
  std::printf("# %s: the 48 bottleneck convolutions' forward (with their statistics): unfused %.2f ms, with the choices "
              "%.2f ms (%.2fx)\n",
              d.str().c_str(), total_unfused, total_chosen, total_chosen > 0 ? total_unfused / total_chosen : 0.0);
  std::printf("# %s: their backward (every gradient): unfused %.2f ms, with the choices %.2f ms (%.2fx)\n",
              d.str().c_str(), total_bwd_unfused, total_bwd_chosen,
              total_bwd_chosen > 0 ? total_bwd_unfused / total_bwd_chosen : 0.0);
  return rc;
}

}  // namespace

// `kiln bench conv_fusion`: per ResNet-50 convolution shape (224x224 input), the cuDNN runtime fusion
// (core/ops/conv_fusion.h: conv of relu(x * scale + bias) with the output's per-channel sums) against
// today's unfused chain (mul, add, relu, conv2d, two sums), and the choice the timed mode makes; then the
// same for the op's backward (ops::conv_scale_bias_relu_backward, every gradient asked for: cuDNN's wgrad
// with the scale-bias-ReLU prologue and dgrad + dReLU with kiln's dx/dscale/dbias pass, against the
// unfused recomputation, conv2d's backward, mask, mul and sums). The bench sets KILN_CUDNN_FUSION itself
// (1 for the choice, force and 0 for the two timings) and restores it.
int bench_conv_fusion(const Args& in) {
  static const char* kUsage =
      "usage: kiln bench conv_fusion [batch=32] [dtype=bf16|fp16] [iters=20] [device=0|cuda:N]\n"
      "  per ResNet-50 conv shape: ms of cuDNN's fused scale-bias-ReLU-conv-genstats graph vs the unfused ops\n"
      "  (fwd), of the fused backward graphs (wgrad, dgrad + dReLU) vs the unfused backward (bwd), and which\n"
      "  the first-sight timing chooses (GPU only)\n";
  if (wants_help(in, kUsage)) return 0;
  Args args = in;
  std::vector<Device> devices = bench_devices(args);
  const KeyValueArgs kv("bench conv_fusion", args, {{"batch", "32"}, {"dtype", "bf16"}, {"iters", "20"}});
  const int64_t batch = kv.integer("batch", 1), iters = kv.integer("iters", 1);
  const std::string dts = kv.str("dtype");
  KILN_CHECK(dts == "bf16" || dts == "fp16" || dts == "f16", "bench conv_fusion: 'dtype=", dts,
             "': accepted values are bf16 and fp16");
  const DType t = dts == "bf16" ? DType::bf16 : DType::f16;
  std::vector<Device> gpus;
  for (const Device& d : devices)
    if (d.is_cuda()) gpus.push_back(d);
  if (gpus.empty()) {
    std::fprintf(stderr,
                 "kiln bench conv_fusion: needs a CUDA GPU (it times cuDNN's fused graph); %s\n",
                 cuda_device_count() == 0 ? "this machine has none visible" : "device= named none; use device=0");
    return 1;
  }
  std::optional<std::string> old;
  if (const char* v = std::getenv("KILN_CUDNN_FUSION")) old = v;
  std::printf("# kiln bench conv_fusion: ResNet-50's conv shapes, batch %lld, %s, NHWC; %lld timed iterations "
              "after 3 untimed; y = conv(relu(x * scale + bias)) with sum(y), sum(y^2) per channel (fwd); its "
              "gradients dx, dscale, dbias, dw from a random dy (bwd; chosen: d = dgrad + dReLU fused, w = wgrad "
              "fused)\n",
              static_cast<long long>(batch), dtype_name(t), static_cast<long long>(iters));
  std::printf("%-7s %-30s %5s %10s %11s %8s %-8s %10s %11s %8s %-8s %s\n", "device", "x -> conv", "count", "fwd fused",
              "fwd unfused", "speedup", "chosen", "bwd fused", "bwd unfused", "speedup", "chosen", "note");
  int rc = 0;
  for (const Device& d : gpus) rc |= bench_conv_fusion_on(d, batch, t, iters);
  if (old) setenv("KILN_CUDNN_FUSION", old->c_str(), 1);
  else unsetenv("KILN_CUDNN_FUSION");
  return rc;
}

}  // namespace kiln::cli
