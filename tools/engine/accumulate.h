// Gradient accumulation (`train.accumulate`): data.batch_size stays the global batch of one optimizer
// step; each of the W ranks splits its batch of batch/W into N micro-batches of batch/(W*N), runs
// forward and backward on each with the loss weighted by its share of the batch (1/N when they are
// equal), summing the gradients in .grad, and then takes one clip/optimizer step. The gradient is
// the one of the whole batch (up to f32 rounding), so the updates are those of the N-times-larger
// batch for a model without batch norm (batch norm normalises each micro-batch by its own
// statistics, as in PyTorch). The LR schedule, state.step and steps per epoch count optimizer steps;
// fp16 loss scaling checks and unscales once per step; with several ranks the gradients are
// all-reduced once per step (GradSync is deferred during the first N-1 backward passes, as
// DistributedDataParallel's no_sync()).
//   "train": {"accumulate": 4}          N micro-batches per step (default 1)
//   "train": {"accumulate": "auto"}     AutoBatch measures the largest micro-batch that fits and the
//                                       trainer takes the smallest N whose micro-batch fits
// Tests: tests/engine/accumulate_test.cpp. Docs: docs/ema_accumulate.md.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "tools/engine/train_options.h"
#include "data/loader.h"
#include "tools/engine/autobatch.h"

namespace kiln {

// Refuses a global batch that does not split into `world` ranks x `n` equal micro-batches, naming
// data.batch_size and train.accumulate.
void check_accumulation(int64_t global_batch, int world, int64_t n);

// The smallest N that divides `per_rank_batch` with per_rank_batch / N <= max_micro_batch; throws
// (naming data.batch_size and train.accumulate) when even a micro-batch of 1 does not fit.
int64_t smallest_accumulation(int64_t per_rank_batch, int64_t max_micro_batch);

// train.accumulate = "auto": AutoBatch (tools/engine/autobatch.h) with `probe` measures the largest
// micro-batch that fits in `fraction` of `free_bytes` (capped at the rank's batch), then the smallest
// N is taken. `report` says what was measured and chosen, for the log.
struct AccumulationPlan {
  int64_t n = 1;
  int64_t micro_batch = 0;  // per rank
  AutoBatchResult autobatch;
  std::string report;
};
AccumulationPlan plan_accumulation(const std::function<double(int64_t)>& probe, double free_bytes, double fraction,
                                   int64_t per_rank_batch);

// The sizes of the micro-batches a batch of `batch` samples splits into (N of them, as equal as
// possible, larger first; fewer when batch < N: no empty micro-batch). Their sum is `batch`.
std::vector<int64_t> micro_batch_sizes(int64_t batch, int64_t n);

// Samples [start, start + n) of `b` (images, labels, indices; the padding that falls in them).
Batch micro_batch(const Batch& b, int64_t start, int64_t n);

}  // namespace kiln
