// train.precision = "auto": the units, or on a CPU with bf16 units the measured step (precision_probe.h).
#include "tools/engine/precision_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <vector>

#include "core/comm.h"
#include "core/device.h"
#include "tools/deploy/checkpoint.h"
#include "tools/deploy/config.h"
#include "tools/deploy/model_io.h"
#include "tools/deploy/precision.h"
#include "tools/engine/batch_images.h"
#include "tools/engine/train_step.h"

namespace fs = std::filesystem;

namespace kiln {

std::string faster_precision(const PrecisionTiming& t) {
  return t.bf16_ms > 0 && t.fp32_ms > 0 && t.bf16_ms <= kBf16StepShare * t.fp32_ms ? "bf16" : "fp32";
}

std::string precision_report(const PrecisionTiming& t, const std::string& choice) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "precision: auto -> %s: a training step of %lld images (forward and backward) measured on this CPU: "
                "fp32 %.3g ms, bf16 %.3g ms; bf16 is taken when its step takes at most %.0f%% of fp32's "
                "(docs/precision.md)",
                choice.c_str(), static_cast<long long>(t.batch), t.fp32_ms, t.bf16_ms, kBf16StepShare * 100);
  return buf;
}

namespace trainer {
namespace {

using Clock = std::chrono::steady_clock;

// The fastest of a few forward-and-backward passes in `precision` (StepUse::probe: no update), after
// one untimed pass that pays for the convolution algorithms' choice and the allocations.
double fastest_step_ms(const std::string& precision, const RunConfig& cfg, const RunData& data, Learner& learner,
                       Device device, int64_t batch) {
  StepOptions so = step_options(cfg.opt());
  so.precision = precision;
  so.class_weights = learner.class_weights;
  so.use = StepUse::probe;
  const StepSetup setup = make_step_setup(so, device, *learner.optimizer);
  const ImageShape shape = data.dcfg.transforms(Split::train).output_shape(data.train_set->image_shape());
  const StepBatch b{probe_images(batch, shape, false, device, setup.compute), Tensor::zeros({batch}, DType::i64, device),
                    Tensor(), data.dcfg.train_transforms.normalize().options()};
  double best = std::numeric_limits<double>::infinity(), spent = 0;
  for (int i = 0; i < 11 && (i < 4 || spent < 300); ++i) {  // 3 timed passes, more while under 0.3 s
    learner.optimizer->zero_grad();
    const Clock::time_point t0 = Clock::now();
    train_step(*learner.model, *learner.optimizer, b, setup);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i == 0) continue;
    best = std::min(best, ms);
    spent += ms;
  }
  learner.optimizer->zero_grad();
  return best;
}

// Both precisions timed on this rank's device; the model's buffers and the generator put back.
PrecisionTiming time_precisions(const Replica& rep, const RunConfig& cfg, const RunData& data, Learner& learner) {
  PrecisionTiming t;
  const int64_t micro = cfg.breq.auto_fraction > 0 ? kProbeMaxBatch
                                                    : cfg.breq.global / rep.world / std::max<int64_t>(1, cfg.opt().accumulate);
  t.batch = std::max<int64_t>(1, std::min({micro, kProbeMaxBatch, data.train_set->size()}));
  const ProbeRestore restore(*learner.model);
  t.fp32_ms = fastest_step_ms("fp32", cfg, data, learner, rep.device, t.batch);
  t.bf16_ms = fastest_step_ms("bf16", cfg, data, learner, rep.device, t.batch);
  return t;
}

// A resumed run's precision as its run folder records it ("" where it records none).
std::string recorded_precision(const std::string& resume) {
  const fs::path run = is_run_folder(resume) ? fs::path(resume) : fs::path(resolve_checkpoint(resume)).parent_path();
  try {
    const json c = load_config_file((run / "config.json").string());
    const json p = c.value("train", json::object()).value("precision", json());
    if (p.is_string() && p != "auto") return p.get<std::string>();
  } catch (const Error&) {  // no config as run: the resume itself says what is wrong with the folder
  }
  return "";
}

}  // namespace

void decide_auto_precision(const Replica& rep, RunConfig& cfg, const RunData& data, Learner& learner) {
  if (cfg.opt().precision != "auto") return;
  std::string choice = cfg.opt().resume.empty() ? "" : recorded_precision(cfg.opt().resume);
  PrecisionTiming t;
  if (choice.empty()) {
    // Every rank votes: bf16 units (a GPU: enough), and on a CPU with them, bf16 measured faster.
    const bool units = resolve_precision("auto", rep.device) == "bf16";
    if (units && rep.device.is_cpu()) t = time_precisions(rep, cfg, data, learner);
    std::vector<double> votes{units && (!rep.device.is_cpu() || faster_precision(t) == "bf16") ? 1.0 : 0.0};
    rep.comm.all_reduce_doubles(votes);
    choice = votes[0] == rep.world ? "bf16" : "fp32";
  }
  cfg.opt().precision = choice;  // recorded as run: eval, predict and resume compute the same way
  cfg.compute = compute_dtype_of(choice, rep.device);
  if (rep.show && t.batch > 0)
    std::cout << precision_report(t, choice)
              << (rep.world > 1 ? " (this rank's; bf16 only where every rank measured it faster)" : "") << "\n";
}

}  // namespace trainer
}  // namespace kiln
