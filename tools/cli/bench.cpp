// `kiln bench matmul [n=4096] [iters=10] [warmup=2] [device=...]`: the CPU-vs-GPU matrix product
// table, an n x n x n product per row, fp32 and bf16, CPU and every visible GPU (or only `device`).
// `kiln bench conv [iters=10] [warmup=2] [device=...]`: a 3x3, 64->64, pad 1 conv2d with bias on a (32, 32, 32, 64)
// NHWC batch, forward alone and forward + backward (data, weights, bias), fp32 and bf16.
// `kiln bench train [model=resnet50] [batch=128] [size=224] [channels=3] [classes=1000] [steps=20]
//  [warmup=5] [device=] [precision=fp32] [cudnn_benchmark=0] [stem=] [conv_algo=] [rounds=1]`: training
// throughput of a registry model
// on one synthetic batch (normal images, fixed labels) kept on the device: forward, cross-entropy,
// backward, SGD (momentum 0.9, Nesterov, weight decay 5e-5) per step; prints images/s of the timed
// steps (the data loader is not involved: this is the model's speed, see tools/bench/bench_gpu.py).
// `kiln bench winograd [model=resnet18] [stem=cifar] [size=32] [channels=3] [classes=10] [batch=128] [dtype=bf16|fp32] [cache=0]` (also
// `kiln bench conv_algo`): one training step of the model with the convolution algorithm chooser
// (core/conv_policy.h) measuring from scratch; per layer shape and pass (forward, backward-data,
// backward-weights) the candidates' times (direct, Winograd, im2col, blocked) and the choice.
// `kiln bench conv_fusion` and `kiln bench bn_relu`, the fused kernels of a ResNet block against the ops
// they replace: tools/cli/bench_fusion.cpp (the helpers the benches share: bench_util.h).
// `kiln bench data CONFIG ...`: the input pipeline's images/s, in tools/cli/data_cmd.cpp.
//
// Output: '#' lines are comments; then a header and one whitespace-separated row per case
// (case, device, dtype, ms per iteration, TFLOPS), which tools/bench/bench_ops.py parses.
// Times come from std::chrono::steady_clock around `iters` runs after `warmup` untimed ones.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "core/autograd.h"
#include "core/host_wait.h"
#include "core/dnnl_context.h"
#include "core/ops/conv2d.h"
#include "core/ops/conv_fusion.h"
#include "core/ops/elementwise.h"
#include "core/conv_policy.h"
#include "core/ops/linear.h"
#include "core/ops/loss.h"
#include "core/rng.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "optim/sgd.h"
#include "tools/cli/bench_util.h"
#include "tools/cli/commands.h"
#include "tools/cli/kv_args.h"
#include "tools/engine/train_step.h"
#include "tools/engine/trainer.h"

namespace kiln::cli {

namespace {
int64_t min_int_arg(const std::string& k) {
  return k == "warmup" || k == "cudnn_benchmark" || k == "profile" || k == "paced" ? 0 : 1;
}
}  // namespace

std::map<std::string, int64_t> parse_int_args(const char* cmd, const Args& args, std::map<std::string, int64_t> defs) {
  std::map<std::string, std::string> text;
  for (const auto& [k, v] : defs) text[k] = std::to_string(v);
  const KeyValueArgs kv(cmd, args, text);
  for (auto& [k, v] : defs) v = kv.integer(k, min_int_arg(k));
  return defs;
}

double time_ms(const std::function<void()>& step, const std::function<void()>& sync, int64_t warmup, int64_t iters,
               double* blocked_s, const std::function<void(bool)>& profile) {
  for (int64_t i = 0; i < warmup; ++i) step();
  sync();
  if (profile) profile(true);
  const double w0 = host_wait_stats().seconds;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) step();
  if (blocked_s) *blocked_s = host_wait_stats().seconds - w0;
  sync();
  if (profile) profile(false);
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count() / static_cast<double>(iters);
}

namespace {

// The host's own time to issue one step, in ms: the median over `k` steps, each started on an idle
// device (`sync` first), of the step call's duration less the time it spent blocked inside (a read
// that waits for the device). Near the step time, the host limits the step; far below it, the device
// does. (In the timed steps the two overlap, so their time alone cannot tell.)
double host_issue_ms(const std::function<void()>& step, const std::function<void()>& sync, int64_t k) {
  std::vector<double> ms;
  for (int64_t i = 0; i < k; ++i) {
    sync();
    const double w0 = host_wait_stats().seconds;
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ms.push_back(wall - (host_wait_stats().seconds - w0) * 1e3);
  }
  sync();
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0.0 : ms[ms.size() / 2];
}

}  // namespace

// "n/a" on a device whose reads do not wait (the CPU: nothing to block on), else the blocked share of
// the step time in percent.
std::string host_blocked_column(const Device& d, double blocked_s, double total_s) {
  if (!reads_block(d)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", total_s > 0 ? 100.0 * blocked_s / total_s : 0.0);
  return buf;
}

void sync_on(const Tensor& t) {
  if (t.defined() && reads_block(t.device())) (void)t.detach().reshape({-1}).slice(0, 0, 1).to(Device::cpu()).item();
}

namespace {

void print_row(const char* name, const Device& d, const char* dtype, double ms, double flops) {
  std::printf("%-14s %-7s %-5s %12.3f %9.4f\n", name, d.str().c_str(), dtype, ms, flops / (ms * 1e-3) / 1e12);
  std::fflush(stdout);
}

void print_header(const std::vector<Device>& devices) {
  std::printf("# threads: %d (OMP_NUM_THREADS / omp_get_max_threads)\n", omp_get_max_threads());
  if (cuda_device_count() == 0) std::printf("# no GPU visible (cuda_device_count() = 0): CPU rows only\n");
  if (!onednn::native_compute(DType::bf16))
    std::printf(
        "# cpu bf16: this CPU has no native bf16 kernels in oneDNN; bf16 operands are converted to f32, "
        "computed in f32 and rounded to bf16\n");
  std::printf("%-14s %-7s %-5s %12s %9s\n", "case", "device", "dtype", "ms/iter", "TFLOPS");
}

}  // namespace

std::vector<Device> bench_devices(Args& args) {
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (it->rfind("device=", 0) != 0) continue;
    std::vector<Device> d = parse_device_list(it->substr(7));
    args.erase(it);
    return d;
  }
  std::vector<Device> d{Device::cpu()};
  for (int i = 0; i < cuda_device_count(); ++i) d.push_back(Device::cuda(i));
  return d;
}

namespace {

// Runs one row; a device without the op (a GPU before its kernels exist) gets a comment, not a crash.
void run_row(const char* name, const Device& d, const char* dtype, double flops, const std::function<double()>& f) {
  try {
    print_row(name, d, dtype, f(), flops);
  } catch (const Error& e) {
    std::printf("# %s on %s %s skipped: %s\n", name, d.str().c_str(), dtype, e.what());
  }
}

int bench_matmul(const Args& in) {
  static const char* kUsage = "usage: kiln bench matmul [n=4096] [iters=10] [warmup=2] [device=cpu|0|cuda:N]\n";
  if (wants_help(in, kUsage)) return 0;
  Args args = in;
  std::vector<Device> devices = bench_devices(args);
  auto a = parse_int_args("bench matmul", args, {{"n", 4096}, {"iters", 10}, {"warmup", 2}});
  int64_t n = a["n"];
  std::printf("# kiln bench matmul: C = A @ B with A, B of %lld x %lld, %lld warm-up + %lld timed runs\n",
              static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(a["warmup"]),
              static_cast<long long>(a["iters"]));
  print_header(devices);
  double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  NoGradGuard ng;
  for (const Device& d : devices) {
    for (DType t : {DType::f32, DType::bf16}) {
      const char* name = t == DType::f32 ? "fp32" : "bf16";
      run_row("matmul", d, name, flops, [&] {
        Generator gen(1);
        Tensor x = rand_normal({n, n}, 0.0, 1.0, t, d, &gen), y = rand_normal({n, n}, 0.0, 1.0, t, d, &gen);
        Tensor out;
        return time_ms([&] { out = ops::matmul(x, y); }, [&] { sync_on(out); }, a["warmup"], a["iters"]);
      });
    }
  }
  return 0;
}

int bench_conv(const Args& in) {
  static const char* kUsage =
      "usage: kiln bench conv [iters=10] [warmup=2] [device=cpu|0|cuda:N]\n"
      "  3x3 64->64 convolution forward and forward+backward on x (32, 32, 32, 64), fp32 and bf16\n";
  if (wants_help(in, kUsage)) return 0;
  Args args = in;
  std::vector<Device> devices = bench_devices(args);
  auto a = parse_int_args("bench conv", args, {{"iters", 10}, {"warmup", 2}});
  const int64_t N = 32, H = 32, W = 32, C = 64, K = 3;
  std::printf(
      "# kiln bench conv: x (%lld, %lld, %lld, %lld) NHWC, w (%lld, %lld, %lld, %lld), bias, stride 1, pad 1; "
      "%lld warm-up + %lld timed runs\n",
      (long long)N, (long long)H, (long long)W, (long long)C, (long long)C, (long long)K, (long long)K, (long long)C,
      static_cast<long long>(a["warmup"]), static_cast<long long>(a["iters"]));
  std::printf("# conv_fwd_bwd = forward + backward-data + backward-weights (+bias) through autograd\n");
  print_header(devices);
  double fwd_flops = 2.0 * N * H * W * C * K * K * C;
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  for (const Device& d : devices) {
    for (DType t : {DType::f32, DType::bf16}) {
      const char* name = t == DType::f32 ? "fp32" : "bf16";
      Generator gen(2);
      Tensor x, w, b, gy;
      try {
        x = rand_normal({N, H, W, C}, 0.0, 1.0, t, d, &gen);
        w = rand_normal({C, K, K, C}, 0.0, 0.05, t, d, &gen);
        b = rand_normal({C}, 0.0, 0.1, t, d, &gen);
        gy = rand_normal({N, H, W, C}, 0.0, 1.0, t, d, &gen);
      } catch (const Error& e) {
        std::printf("# conv on %s %s skipped: %s\n", d.str().c_str(), name, e.what());
        continue;
      }
      run_row("conv_fwd", d, name, fwd_flops, [&] {
        NoGradGuard ng;
        Tensor y;
        return time_ms([&] { y = ops::conv2d(x, w, b, p); }, [&] { sync_on(y); }, a["warmup"], a["iters"]);
      });
      run_row("conv_fwd_bwd", d, name, 3 * fwd_flops, [&] {
        for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
        auto step = [&] {
          for (Tensor* t : {&x, &w, &b}) t->zero_grad();
          ops::conv2d(x, w, b, p).backward(gy);
        };
        double ms = time_ms(
            step, [&] { sync_on(w.grad()); }, a["warmup"], a["iters"]);
        for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(false);
        return ms;
      });
    }
  }
  return 0;
}

namespace ca = ops::conv_algo;
namespace wg = ops::conv_algo;

// The candidates a conv_algo name leaves out ("auto-winograd-im2col" -> winograd, im2col); false when
// `n` is not "auto" followed by one or more "-NAME" of winograd, im2col and blocked.
bool conv_algos_left_out(const std::string& n, std::vector<ca::Algo>* out) {
  if (n.rfind("auto", 0) != 0 || n.size() == 4 || n.back() == '-') return false;
  std::istringstream rest(n.substr(5));
  for (std::string name; std::getline(rest, name, '-');) {
    bool known = false;
    for (ca::Algo a : {ca::Algo::winograd, ca::Algo::im2col, ca::Algo::blocked})
      if (name == ca::algo_name(a)) out->push_back(a), known = true;
    if (!known) return false;
  }
  return n[4] == '-';
}

// conv_algo=A,B,...: each one accepted, or an error naming what is.
std::vector<std::string> parse_conv_algos(const std::string& arg) {
  std::vector<std::string> algos = split_commas(arg);
  for (const std::string& n : algos) {
    std::vector<ca::Algo> unused;
    KILN_CHECK(n == "auto" || n == "heuristic" || n == "direct" || n == "winograd" || conv_algos_left_out(n, &unused),
               "bench train: conv_algo=", arg,
               ": accepted values are auto, heuristic, direct, winograd and auto less candidates (auto-im2col, "
               "auto-winograd, auto-blocked, auto-winograd-im2col), comma-separated");
  }
  return algos;
}

// Sets the CPU's convolution choice to conv_algo name `n` (and the candidates it leaves out).
void use_conv_algo(const std::string& n) {
  std::vector<ca::Algo> out;
  ca::set_excluded(conv_algos_left_out(n, &out) ? out : std::vector<ca::Algo>{});
  wg::set_mode(ca::parse_mode(n.rfind("auto-", 0) == 0 ? "auto" : n, "bench train: conv_algo"));
}

// What `kiln bench train` times: a registry model, SGD, one synthetic batch on the device, and the
// trainer's step (make_step_setup's StepUse::time: the loss is not read each step).
struct TrainBench {
  Device d;
  std::shared_ptr<Module> model;
  std::unique_ptr<SGD> opt;
  StepSetup setup;
  Tensor x, y, loss;
  void step() { loss = train_step(*model, *opt, StepBatch{x, y, Tensor()}, setup).last_loss; }
  void sync() const { if (loss.defined()) (void)loss.item(); }
};

// As the trainer does (docs/precision.md): f32 master weights cast per forward, f32 loss, and for
// fp16 dynamic loss scaling. a["precision"] becomes auto's choice, for the table.
TrainBench make_train_bench(std::map<std::string, std::string>& a, std::map<std::string, int64_t>& ints,
                            const KeyValueArgs& kv) {
  TrainBench b;
  b.d = parse_device_list(a["device"])[0];
  a["precision"] = resolve_precision(a["precision"], b.d);
  const int64_t batch = ints["batch"], size = ints["size"], ch = ints["channels"], classes = ints["classes"];
  set_conv_benchmark(b.d, ints["cudnn_benchmark"] != 0);  // cuDNN's on a GPU; the CPU has none
  manual_seed(0);
  nlohmann::json mj = {{"name", a["model"]}, {"in_channels", ch}, {"num_classes", classes}};
  if (!a["stem"].empty()) mj["stem"] = a["stem"];
  for (const char* k : {"depth", "width"})  // the model's own check names model.depth / model.width
    if (!a[k].empty()) mj[k] = kv.integer(k, 1);
  if (!a["se_reduction"].empty()) mj["se_reduction"] = kv.integer("se_reduction", 0);
  // model.fused_bn_conv (bottleneck ResNets; the model's own check refuses it elsewhere)
  KILN_CHECK(a["fused_bn_conv"] == "0" || a["fused_bn_conv"] == "1", "bench train: 'fused_bn_conv=",
             a["fused_bn_conv"], "': accepted: 0 or 1 (model.fused_bn_conv)");
  if (a["fused_bn_conv"] == "1") mj["fused_bn_conv"] = true;
  b.model = models::build_model(mj, "model");
  b.model->to(b.d);
  b.model->train();
  std::vector<ParamRef> params;
  for (auto& [name, p] : b.model->named_parameters()) params.push_back({name, p, false});
  mark_no_decay_1d(params);
  SGDOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  so.nesterov = true;
  so.weight_decay = 5e-5;
  b.opt = std::make_unique<SGD>(params, so);
  StepOptions step;
  step.precision = a["precision"];
  step.use = StepUse::time;
  step.cuda_graph = a["cuda_graph"];  // train.cuda_graph's values and checks, named as this bench's argument
  const GraphMode graph = parse_graph_mode(a["cuda_graph"], "bench train: cuda_graph");
  KILN_CHECK(graph != GraphMode::on || can_capture(b.d), "bench train: cuda_graph=on needs a CUDA device; ",
             b.d.str(), " has no graphs; accepted there: auto (eager there) or off");
  b.setup = make_step_setup(step, b.d, *b.opt);
  if (b.setup.graph) b.setup.graph->log = [](const std::string& line) { std::printf("# %s\n", line.c_str()); };
  Generator gen(1);
  b.x = rand_normal({batch, size, size, ch}, 0.0, 1.0, DType::f32, b.d, &gen).to(b.setup.compute);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = (i * 7919) % classes;
  b.y = Tensor::from_vector(labels, {batch}, DType::i64, b.d);
  return b;
}

// paced=1: lockstep with a driver: one timed step per line read, its time printed at once, so the
// driver can pair each of kiln's steps with one of another program's taken moments apart (a
// shared machine's speed drifts over minutes; a pair of adjacent steps sees the same machine).
void run_paced(TrainBench& b, const std::vector<std::string>& algos, int64_t warmup, int64_t steps) {
  if (!algos.empty() && !algos[0].empty()) use_conv_algo(algos[0]);
  for (int64_t i = 0; i < warmup; ++i) b.step();
  b.sync();
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line;
  for (int64_t i = 0; i < steps && std::getline(std::cin, line); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    b.step();
    b.sync();
    std::printf("step_ms %.3f\n", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
  }
}

// The timings of each conv_algo, round after round (alternating within a round).
struct TrainTimings {
  std::vector<std::vector<double>> ms;  // per algo, per round: ms per step
  std::vector<double> blocked, timed;   // per algo: seconds, all rounds
  std::vector<double> host_ms;          // per algo (a GPU): the host's time to issue a step
};

TrainTimings time_train_rounds(TrainBench& b, const std::vector<std::string>& algos,
                               std::map<std::string, int64_t>& ints) {
  TrainTimings t{std::vector<std::vector<double>>(algos.size()), std::vector<double>(algos.size(), 0.0),
                 std::vector<double>(algos.size(), 0.0), std::vector<double>(algos.size(), 0.0)};
  auto step = [&] { b.step(); };
  auto sync = [&] { b.sync(); };
  for (int64_t r = 0; r < ints["rounds"]; ++r)
    for (size_t i = 0; i < algos.size(); ++i) {
      if (!algos[i].empty()) use_conv_algo(algos[i]);
      double blocked = 0;
      t.ms[i].push_back(time_ms(
          step, sync, r == 0 ? ints["warmup"] : 0, ints["steps"], &blocked,
          ints["profile"] ? std::function<void(bool)>([&](bool on) { profile_range(b.d, on); }) : nullptr));
      t.blocked[i] += blocked;
      t.timed[i] += t.ms[i].back() * 1e-3 * static_cast<double>(ints["steps"]);
    }
  if (reads_block(b.d))  // host_ms: the host's own time to issue a step, where the device runs behind it
    for (size_t i = 0; i < algos.size(); ++i) {
      if (!algos[i].empty()) use_conv_algo(algos[i]);
      t.host_ms[i] = host_issue_ms(step, sync, std::min<int64_t>(ints["steps"], 5));
    }
  return t;
}

// The table's comment lines, header and one row per conv_algo.
void print_train_table(const TrainBench& b, const std::vector<std::string>& algos, const TrainTimings& tt,
                       std::map<std::string, std::string>& a, std::map<std::string, int64_t>& ints) {
  const Device d = b.d;
  if (d.is_cpu()) {
    const ops::conv_algo::Stats st = ops::conv_algo::stats();
    std::printf("# conv_algo: %lld (shape, pass) pairs measured in %.2f s (within the warm-up steps), %lld from the "
                "disk cache\n",
                (long long)st.measured, st.measure_seconds, (long long)st.from_disk);
  }
  if (ints["rounds"] > 1)
    std::printf("# ms/step and images/s: the median of %lld rounds; best: the fastest round\n",
                static_cast<long long>(ints["rounds"]));
  std::printf("# host_blocked: the share of the timed steps the host spent blocked in CUDA calls (syncs, "
              "event waits, blocking copies; the final wait that ends the timing not counted)\n");
  if (reads_block(d))
    std::printf("# host_ms: the host's own time to issue one step (median of up to 5 extra steps, each started "
                "on an idle GPU, the waits inside it left out); near ms/step, the host limits the step\n");
  std::printf("%-10s %-7s %-5s %6s %-12s %12s %10s %10s %10s %12s %8s\n", "model", "device", "dtype", "batch",
              "conv_algo", "ms/step", "images/s", "best", "last loss", "host_blocked", "host_ms");
  const int64_t batch = ints["batch"];
  for (size_t i = 0; i < algos.size(); ++i) {
    std::vector<double> t = tt.ms[i];
    std::sort(t.begin(), t.end());
    double ms = t[t.size() / 2];
    char host[32] = "n/a";
    if (reads_block(d)) std::snprintf(host, sizeof host, "%.2f", tt.host_ms[i]);
    std::printf("%-10s %-7s %-5s %6lld %-12s %12.2f %10.1f %10.1f %10.4f %12s %8s\n", a["model"].c_str(),
                d.str().c_str(), a["precision"].c_str(), (long long)batch,
                algos[i].empty() ? "default" : algos[i].c_str(), ms, static_cast<double>(batch) / (ms * 1e-3),
                static_cast<double>(batch) / (t.front() * 1e-3), b.loss.item(),
                host_blocked_column(d, tt.blocked[i], tt.timed[i]).c_str(), host);
  }
}

int bench_train(const Args& args) {
  static const char* kUsage =
      "usage: kiln bench train [model=resnet50] [batch=128] [size=224] [channels=3] [classes=1000] [steps=20]\n"
      "                        [warmup=5] [device=] [precision=fp32|bf16|fp16|auto] [cudnn_benchmark=0] [stem=imagenet|cifar]\n"
      "                        [conv_algo=auto|heuristic|direct|winograd|auto-im2col|auto-blocked[,...]] [rounds=1]\n"
      "                        [profile=0] [depth=] [width=] [se_reduction=] [paced=0] [cuda_graph=off|on|auto]\n"
      "                        [fused_bn_conv=0|1]\n"
      "  images/s of training steps of a registry model on synthetic data; conv_algo=A,B alternates the CPU's\n"
      "  convolution choice round by round in one process (auto-im2col: measured, without the im2col\n"
      "  candidates; core/conv_policy.h); depth= and width= set the model's\n"
      "  keys of those names (model=resnet_cifar depth=14 width=24: a CIFAR ResNet's depth 6n+2 and first\n"
      "  stage's channels); se_reduction=R sets model.se_reduction (an SE-ResNet); paced=1: after the warm-up, each timed step waits for a line on stdin and prints\n"
      "  `step_ms T` when done (a driver interleaves another program's steps with kiln's:\n"
      "  tools/bench/bench_train.py --paired); profile=1 records only the timed\n"
      "  steps in an attached profiler (ncu --profile-from-start off; nsys --capture-range=cudaProfilerApi);\n"
      "  cuda_graph= is train.cuda_graph: the step's forward and backward replayed from a CUDA graph (a GPU);\n"
      "  fused_bn_conv=1 is model.fused_bn_conv: the bottlenecks' conv-BN-ReLU chain through the fused op\n"
      "  (cuDNN runtime fusion on a GPU, docs/cuda_backend.md)\n";
  if (wants_help(args, kUsage)) return 0;
  std::map<std::string, std::string> a = {{"model", "resnet50"}, {"batch", "128"},   {"size", "224"},
                                          {"channels", "3"},     {"classes", "1000"}, {"steps", "20"},
                                          {"warmup", "5"},       {"device", ""},      {"precision", "fp32"},
                                          {"cudnn_benchmark", "0"}, {"stem", ""},       {"conv_algo", ""},
                                          {"rounds", "1"}, {"profile", "0"}, {"depth", ""}, {"width", ""},
                                          {"se_reduction", ""}, {"paced", "0"}, {"cuda_graph", "off"}, {"fused_bn_conv", "0"}};
  const KeyValueArgs kv("bench train", args, a);
  for (auto& [k, v] : a) v = kv.str(k);
  std::map<std::string, int64_t> ints;
  for (const char* k : {"batch", "size", "channels", "classes", "steps", "warmup", "cudnn_benchmark", "rounds", "profile", "paced"})
    ints[k] = kv.integer(k, min_int_arg(k));
  // conv_algo=direct,winograd: the CPU's 3x3 convolution algorithm (core/conv_policy.h); with
  // several, the rounds alternate between them in one process, for A/B timings on a noisy machine.
  // auto-im2col, auto-winograd, auto-winograd-im2col: the measured choice without those candidates.
  std::vector<std::string> algos = parse_conv_algos(a["conv_algo"]);
  TrainBench b = make_train_bench(a, ints, kv);
  const int64_t batch = ints["batch"], size = ints["size"], ch = ints["channels"];
  std::printf("# kiln bench train: %s, %lld parameters, input (%lld, %lld, %lld, %lld) NHWC %s, %lld classes, on %s\n",
              a["model"].c_str(), static_cast<long long>(b.model->num_parameters()), (long long)batch, (long long)size,
              (long long)size, (long long)ch, a["precision"].c_str(), (long long)ints["classes"], b.d.str().c_str());
  std::printf("# step = forward + cross-entropy + backward + SGD step; %lld warm-up + %lld timed steps%s\n",
              static_cast<long long>(ints["warmup"]), static_cast<long long>(ints["steps"]),
              b.d.is_cuda() ? (ints["cudnn_benchmark"] ? ", cuDNN benchmark mode" : ", cuDNN heuristics") : "");
  if (algos.empty()) algos.push_back("");
  struct Restore {  // the mode and the candidates as they were, however the bench ends
    wg::Mode mode;
    ~Restore() {
      wg::set_mode(mode);
      ops::conv_algo::set_excluded({});
    }
  } restore{wg::mode()};
  if (ints["paced"]) {
    KILN_CHECK(ints["paced"] == 1 && ints["rounds"] == 1 && algos.size() <= 1,
               "bench train: paced=1 takes one round and at most one conv_algo (got paced=", ints["paced"],
               ", rounds=", ints["rounds"], ", conv_algo=", a["conv_algo"], ")");
    run_paced(b, algos, ints["warmup"], ints["steps"]);
    return 0;
  }
  const TrainTimings t = time_train_rounds(b, algos, ints);
  print_train_table(b, algos, t, a, ints);
  if (b.setup.graph) {
    const GraphCounts& g = b.setup.graph->counts();
    std::printf("# cuda_graph=%s: %lld capture(s), %lld failed, %lld step(s) replayed, %lld eager\n",
                a["cuda_graph"].c_str(), (long long)g.captures, (long long)g.failed_captures, (long long)g.replays,
                (long long)g.eager);
  }
  if (a["fused_bn_conv"] == "1") {
    const ops::ConvFusionCounts c = ops::conv_fusion_counts();
    std::printf("# fused_bn_conv=1: the blocks' conv-BN-ReLU chain through the fused op; cuDNN's fused graphs ran in "
                "%lld of %lld forward calls, %lld of %lld dgrad, %lld of %lld wgrad (the rest: the unfused ops, timed "
                "faster or refused; each refusal is a stderr line)\n",
                (long long)c.forward_fused, (long long)c.forward, (long long)c.dgrad_fused, (long long)c.dgrad,
                (long long)c.wgrad_fused, (long long)c.wgrad);
  }
  return 0;
}


namespace {

// The chooser's table (core/conv_policy.h): per (shape, pass) each candidate's ms, the choice and its
// speedup over direct; then per pass the sums of direct and of the choices.
void print_conv_algo_table() {
  namespace ca = ops::conv_algo;
  std::printf("%-54s %-16s %9s %9s %9s %9s  %-8s %7s\n", "shape", "pass", "direct", "winograd", "im2col", "blocked",
              "choice", "speedup");
  std::map<ca::Pass, std::pair<double, double>> sum;  // direct, chosen
  for (const ca::Entry& e : ca::entries()) {
    double ms[4] = {-1, -1, -1, -1};  // the order of ca::Algo
    for (const ca::Timing& tm : e.choice.times) ms[static_cast<int>(tm.algo)] = tm.ms;
    auto col = [](double v) {
      char b[16];
      if (v < 0)
        std::snprintf(b, sizeof b, "%9s", "-");
      else
        std::snprintf(b, sizeof b, "%9.2f", v);
      return std::string(b);
    };
    const double chosen = ms[static_cast<int>(e.choice.algo)];
    std::printf("%-54s %-16s %s %s %s %s  %-8s %7.2f\n", e.key.c_str(), ca::pass_name(e.pass), col(ms[0]).c_str(),
                col(ms[1]).c_str(), col(ms[2]).c_str(), col(ms[3]).c_str(), ca::algo_name(e.choice.algo),
                chosen > 0 && ms[0] > 0 ? ms[0] / chosen : 1.0);
    if (ms[0] > 0 && chosen > 0) {
      sum[e.pass].first += ms[0];
      sum[e.pass].second += chosen;
    }
  }
  for (auto& [pass, v] : sum)
    std::printf("# %-16s sum over the measured shapes (each counted once): direct %.2f ms, chosen %.2f ms, %.2fx\n",
                ca::pass_name(pass), v.first, v.second, v.first / v.second);
}

}  // namespace

// One training step's convolutions of a registry model, measured by the chooser
// (core/conv_policy.h) from a fresh process cache: per shape and pass, each candidate's time
// and the choice, then per pass the time of the choices against direct everywhere.
int bench_winograd(const Args& in) {
  static const char* kUsage =
      "usage: kiln bench winograd [model=resnet18] [stem=cifar] [size=32] [channels=3] [classes=10] [batch=128]\n"
      "                           [dtype=bf16|fp32] [cache=0]\n"
      "  (also `kiln bench conv_algo`) the CPU convolution algorithm chosen per layer shape and pass by timing:\n"
      "  direct (oneDNN), winograd (3x3 stride 1), im2col (im2col + GEMM: forward and backward-data of kernels\n"
      "  larger than 1x1, the 3x3 weight gradient), blocked (direct on oneDNN's blocked view of 8- or\n"
      "  16-channel tensors, where input and output have that many); cache=1 reads and writes the\n"
      "  disk cache (KILN_CONV_CACHE) instead of measuring afresh. stem applies to the ImageNet ResNets\n"
      "  (default cifar there: the CIFAR ResNet-18); other models take none\n";
  if (wants_help(in, kUsage)) return 0;
  std::map<std::string, std::string> a = {{"model", "resnet18"}, {"stem", ""},    {"size", "32"},
                                          {"channels", "3"},     {"classes", "10"}, {"batch", "128"},
                                          {"dtype", "bf16"},     {"cache", "0"}};
  const KeyValueArgs kv("bench winograd", in, a);
  for (auto& [k, v] : a) v = kv.str(k);
  KILN_CHECK(a["dtype"] == "bf16" || a["dtype"] == "fp32", "bench winograd: dtype=", a["dtype"],
             ": accepted values are bf16 and fp32");
  KILN_CHECK(a["cache"] == "0" || a["cache"] == "1", "bench winograd: cache=", a["cache"],
             ": accepted values are 0 (measure afresh) and 1 (use the disk cache)");
  std::map<std::string, int64_t> ints{{"batch", kv.integer("batch", 1)},
                                      {"size", kv.integer("size", 1)},
                                      {"channels", kv.integer("channels", 1)},
                                      {"classes", kv.integer("classes", 1)}};
  // The ImageNet ResNets default to the CIFAR stem (the usual 32x32 ResNet-18); other models take none.
  const bool takes_stem = a["model"].rfind("resnet", 0) == 0 && !models::is_cifar_resnet(a["model"]);
  if (a["stem"].empty() && takes_stem) a["stem"] = "cifar";
  ints["cache"] = a["cache"] == "1";
  const DType t = a["dtype"] == "bf16" ? DType::bf16 : DType::f32;
  const int64_t N = ints["batch"], S = ints["size"];
  namespace ca = ops::conv_algo;
  const ca::Mode prev_mode = ca::mode();
  const std::string prev_path = ca::cache_path();
  ca::set_mode(ca::Mode::automatic);
  if (!ints["cache"]) ca::set_cache_path("");
  ca::reset();
  manual_seed(0);
  const int64_t C = ints["channels"], classes = ints["classes"];
  nlohmann::json mj = {{"name", a["model"]}, {"in_channels", C}, {"num_classes", classes}};
  if (!a["stem"].empty()) mj["stem"] = a["stem"];
  std::shared_ptr<Module> model = models::build_model(mj, "model");
  model->train();
  Generator gen(3);
  Tensor x = rand_normal({N, S, S, C}, 0.0, 1.0, DType::f32, Device::cpu(), &gen).to(t);
  std::vector<int64_t> labels(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) labels[static_cast<size_t>(i)] = i % classes;
  Tensor y = Tensor::from_vector(labels, {N}, DType::i64, Device::cpu());
  std::printf("# kiln bench winograd: %s%s%s%s, input (%lld, %lld, %lld, %lld) NHWC %s, cpu, %d threads\n",
              a["model"].c_str(), a["stem"].empty() ? "" : " (stem ", a["stem"].c_str(), a["stem"].empty() ? "" : ")",
              (long long)N, (long long)S, (long long)S, (long long)C, a["dtype"].c_str(), omp_get_max_threads());
  std::printf("# machine: %s\n", ca::machine_id().c_str());
  if (t == DType::bf16 && !onednn::native_compute(t))
    std::printf("# this CPU has no native bf16 convolution: only direct runs (in f32, rounded)\n");
  std::printf("# one training step; each candidate: 1 untimed + 3 timed runs, the fastest kept (ms); %s\n",
              ints["cache"] ? ("disk cache " + ca::cache_path()).c_str() : "disk cache off (measured afresh)");
  const auto t0 = std::chrono::steady_clock::now();
  ops::cross_entropy(model->forward(x).to(DType::f32), y).backward();
  const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_conv_algo_table();
  const ca::Stats st = ca::stats();
  std::printf("# %lld (shape, pass) pairs measured in %.2f s, %lld from the disk cache; the measured step took %.2f s\n",
              (long long)st.measured, st.measure_seconds, (long long)st.from_disk, step_s);
  ca::set_mode(prev_mode);
  ca::set_cache_path(prev_path);
  return 0;
}

// `kiln bench conv_algo`: the same table under the name of what it shows.
int bench_conv_algo(const Args& in) {
  static const char* kUsage =
      "usage: kiln bench conv_algo [model=resnet18] [stem=cifar] [size=32] [channels=3] [classes=10] [batch=128]\n"
      "                            [dtype=bf16|fp32] [cache=0]\n"
      "  the same as `kiln bench winograd`: the CPU convolution algorithm chosen per layer shape and pass\n";
  if (wants_help(in, kUsage)) return 0;
  return bench_winograd(in);
}

}  // namespace

const std::vector<Command>& bench_commands() {
  static const std::vector<Command> kCommands = {
      {"matmul", "[n=4096] [device=...]", "CPU vs GPU matrix product table (fp32, bf16)", bench_matmul},
      {"conv", "[iters=10] [device=...]", "3x3 64->64 conv forward+backward on (32,32,32,64)", bench_conv},
      {"train", "[model=resnet50] [batch=128]", "images/s of training steps on synthetic data", bench_train},
      {"checkpoint", "[model=resnet50]", "time and peak memory per step of each checkpoint policy",
       bench_checkpoint},
      {"winograd", "[model=resnet18] [dtype=bf16|fp32]", "CPU convolution algorithms chosen per layer and pass",
       bench_winograd},
      {"conv_algo", "[model=resnet18] [dtype=bf16|fp32]", "the same as bench winograd", bench_conv_algo},
      {"bn_relu", "[batch=128] [size=32] [channels=64]", "fused batch norm + ReLU backward against the two kernels",
       bench_bn_relu},
      {"conv_fusion", "[batch=32] [dtype=bf16|fp16]", "cuDNN's fused BN-ReLU-conv-stats, fwd and bwd, vs the unfused ops (GPU)",
       bench_conv_fusion},
      {"data", "CONFIG [threads=N]", "images/s of the config's input pipeline",
       bench_data_cmd},  // tools/cli/data_cmd.cpp
  };
  return kCommands;
}

int cmd_bench(const Args& args) { return dispatch(bench_commands(), args, "bench"); }

}  // namespace kiln::cli
