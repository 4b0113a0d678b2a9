// train.precision = "auto", decided by measuring where the units alone do not decide it.
//
// A CPU with bf16 units (AVX-512 BF16 or AMX) is not always faster in bf16: on an Intel Xeon with
// AVX-512 BF16 and no AMX, ResNet-20 at 28x28 trains at 733 images/s in bf16 and 1012 in fp32
// (docs/precision.md). So on such a CPU the run times its own training step, forward and backward
// on random images of its input shape and (up to kProbeMaxBatch) its batch, in fp32 and in bf16,
// and takes bf16 only when its step takes at most kBf16StepShare of fp32's: bf16 must pay for the
// precision it gives up. Elsewhere the units decide, as before: a CPU without them trains fp32 (bf16
// is emulated there, always slower); a GPU of compute capability 8.0 or newer trains bf16 (tensor
// cores; not measured). With several ranks, bf16 only when every rank measured it faster (one
// collective), so all ranks compute alike. A resumed run keeps the precision its run folder records.
//
// The probe leaves the model's buffers and the random generator as they were, and zeroes the
// gradients it made (ProbeRestore, as AutoBatch's probe); its time counts in train.time_budget_minutes.
// Tests: tests/cli/precision_auto_test.cpp, tests/engine/time_budget_test.cpp (Precision.*).
// Docs: docs/precision.md.
#pragma once
#include <cstdint>
#include <string>

#include "tools/engine/replica_run.h"

namespace kiln {

inline constexpr double kBf16StepShare = 0.9;  // bf16 when its step takes at most this share of fp32's
inline constexpr int64_t kProbeMaxBatch = 64;   // the probe's batch: the run's micro-batch, at most this

// The fastest step of each precision, in milliseconds (0: not measured).
struct PrecisionTiming {
  double fp32_ms = 0, bf16_ms = 0;
  int64_t batch = 0;  // images per probe step
};

// "bf16" when t.bf16_ms <= kBf16StepShare * t.fp32_ms, else "fp32".
std::string faster_precision(const PrecisionTiming& t);

// What the run prints: the choice and the CPU measurement it came from.
std::string precision_report(const PrecisionTiming& t, const std::string& choice);

namespace trainer {

// Decides cfg.opt().precision when it is "auto" (as the header says) and sets cfg.compute; nothing
// otherwise. After the model, the optimizer and the datasets are built, before the batch is planned.
void decide_auto_precision(const Replica& rep, RunConfig& cfg, const RunData& data, Learner& learner);

}  // namespace trainer

}  // namespace kiln
