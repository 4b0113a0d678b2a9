// `kiln bench checkpoint [model=resnet50] [size=224] [batch=32] [steps=3] [warmup=1] [device=cpu]
//                        [precision=fp32] [policies=none,blocks] [rounds=1]`
// Gradient checkpointing's trade, measured: for each policy the same model (same seed, same input)
// trains `steps` SGD steps on one synthetic batch (the trainer's step: make_step_setup, tools/engine/train_step.h;
// fp16 with its loss scaler), and the table gives milliseconds per step and the
// allocator's peak during a step, above what lives between steps (weights, optimizer state):
//   step peak     = peak allocated during forward + backward + optimizer step - allocated before it
//   activations   = step peak - the gradients' bytes (gradients are set to none between steps, so
//                   the step allocates them; they are the same for every policy)
// and each policy's ratios against the first one. Peaks come from the device's caching allocator
// (core/allocator.h), which counts every tensor kiln allocates; oneDNN's own scratch memory is
// allocated through it too (user scratchpad).
#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/device.h"
#include "core/ops/loss.h"
#include "core/rng.h"
#include "models/registry.h"
#include "optim/optimizer.h"
#include "tools/cli/commands.h"
#include "tools/cli/kv_args.h"
#include "tools/engine/train_step.h"
#include "tools/engine/trainer.h"

namespace kiln::cli {

namespace {

struct MemoryBenchArgs {
  std::string model = "resnet50";
  int64_t size = 224, batch = 32, steps = 3, warmup = 1, classes = 1000, rounds = 1;
  std::string device = "cpu", precision = "fp32";
  std::vector<std::string> policies = {"none", "blocks"};
};

MemoryBenchArgs parse(const Args& args) {
  MemoryBenchArgs a;
  const KeyValueArgs kv("bench checkpoint", args,
                        {{"model", a.model}, {"size", "224"}, {"batch", "32"}, {"steps", "3"}, {"warmup", "1"},
                         {"classes", "1000"}, {"device", a.device}, {"precision", a.precision},
                         {"policies", "none,blocks"}, {"rounds", "1"}});
  a.model = kv.str("model");
  a.size = kv.integer("size", 8);
  a.batch = kv.integer("batch", 1);
  a.steps = kv.integer("steps", 1);
  a.warmup = kv.integer("warmup", 0);
  a.rounds = kv.integer("rounds", 1);
  a.classes = kv.integer("classes", 2);
  a.device = kv.str("device");
  a.precision = kv.str("precision");
  compute_dtype_of(a.precision, Device::cpu());  // throws for a name it does not accept
  a.policies = split_commas(kv.str("policies"));
  KILN_CHECK(!a.policies.empty(), "bench checkpoint: policies is empty; give e.g. none,blocks,every:2");
  return a;
}

struct Row {
  std::string policy;
  double ms = 0, step_peak = 0, activations = 0;
};

void sync_device(Device d) { synchronize(d); }

Row run_policy(const MemoryBenchArgs& a, const std::string& policy, Device device) {
  manual_seed(0);
  json mj = {{"name", a.model}, {"num_classes", a.classes}, {"checkpoint", policy}};
  std::shared_ptr<Module> model = models::build_model(mj, "model");
  model->to(device);
  model->train();
  std::vector<ParamRef> params;
  double grad_bytes = 0;
  for (auto& [name, p] : model->named_parameters()) {
    params.push_back({name, p, false});
    grad_bytes += static_cast<double>(p.nbytes());
  }
  std::unique_ptr<Optimizer> opt =
      make_optimizer(json{{"name", "sgd"}, {"lr", 0.01}, {"momentum", 0.9}, {"weight_decay", 1e-4}}, params, "optim");
  StepOptions so;  // the trainer's step (tools/engine/train_step.h), the loss not read each step
  so.precision = a.precision;
  so.use = StepUse::time;
  const StepSetup ss = make_step_setup(so, device, *opt);
  Tensor x = rand_normal({a.batch, a.size, a.size, 3}, 0, 1, DType::f32, device).to(ss.compute);
  std::vector<int64_t> labels(static_cast<size_t>(a.batch));
  for (int64_t i = 0; i < a.batch; ++i) labels[static_cast<size_t>(i)] = i % a.classes;
  Tensor y = Tensor::from_vector(labels, {a.batch}).to(device);
  CachingAllocator& alloc = allocator_for(device);
  Row r;
  r.policy = policy;
  auto step = [&] { train_step(*model, *opt, StepBatch{x, y, Tensor()}, ss); };
  for (int64_t i = 0; i < a.warmup; ++i) step();  // also allocates the optimizer state
  sync_device(device);
  double total_ms = 0;
  for (int64_t i = 0; i < a.steps; ++i) {
    opt->zero_grad();  // gradients released before the baseline is read
    sync_device(device);
    size_t base = alloc.stats().allocated;
    alloc.reset_peak();
    auto t0 = std::chrono::steady_clock::now();
    step();
    sync_device(device);
    total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.step_peak = std::max(r.step_peak, static_cast<double>(alloc.stats().peak - base));
  }
  r.ms = total_ms / static_cast<double>(a.steps);
  r.activations = r.step_peak - grad_bytes;
  return r;
}

std::string fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

}  // namespace

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

int bench_checkpoint(const Args& args) {
  static const char* kUsage =
      "usage: kiln bench checkpoint [model=resnet50] [size=224] [batch=32] [steps=3] [warmup=1] [classes=1000]\n"
      "                             [device=cpu] [precision=fp32|bf16|fp16|auto] [policies=none,blocks] [rounds=1]\n"
      "  time and peak memory per training step for each gradient checkpointing policy";
  if (wants_help(args, kUsage)) return 0;
  MemoryBenchArgs a = parse(args);
  Device device = parse_device(a.device);
  a.precision = resolve_precision(a.precision, device);  // the header shows auto's choice
  std::cout << "# bench checkpoint: " << a.model << " " << a.size << "x" << a.size << "x3, batch " << a.batch << ", "
            << a.precision << ", " << device.str() << ", " << a.steps << " timed steps after " << a.warmup
            << " warm-up\n";
  // rounds=N: the policies run N times in turn and ms/step is each policy's median, so a machine
  // whose speed drifts over minutes (shared 2-core VMs: 20-40%) does not favour the one run first.
  std::vector<Row> rows;
  std::vector<std::vector<double>> ms(a.policies.size());
  for (int64_t r = 0; r < a.rounds; ++r)
    for (size_t i = 0; i < a.policies.size(); ++i) {
      Row row = run_policy(a, a.policies[i], device);
      ms[i].push_back(row.ms);
      if (r == 0) rows.push_back(row);
    }
  for (size_t i = 0; i < rows.size(); ++i) {
    std::sort(ms[i].begin(), ms[i].end());
    rows[i].ms = ms[i][ms[i].size() / 2];
  }
  if (a.rounds > 1) std::cout << "# ms/step: the median of " << a.rounds << " alternating rounds\n";
  const double MiB = 1024.0 * 1024.0;
  std::cout << std::left << std::setw(10) << "policy" << std::right << std::setw(12) << "ms/step" << std::setw(16)
            << "step peak MiB" << std::setw(18) << "activations MiB" << std::setw(12) << "time x" << std::setw(14)
            << "activations x" << "\n";
  for (const Row& r : rows) {
    std::cout << std::left << std::setw(10) << r.policy << std::right << std::setw(12) << fixed(r.ms, 1)
              << std::setw(16) << fixed(r.step_peak / MiB, 1) << std::setw(18) << fixed(r.activations / MiB, 1)
              << std::setw(12) << fixed(r.ms / rows[0].ms, 2) << std::setw(14)
              << fixed(r.activations / rows[0].activations, 2) << "\n";
  }
  return 0;
}

}  // namespace kiln::cli
