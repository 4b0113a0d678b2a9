// Gradient accumulation: the option, the batch checks and AutoBatch's choice of N (tools/engine/accumulate.h).
#include "tools/engine/accumulate.h"

#include <algorithm>

#include "core/check.h"
#include "core/json_util.h"

namespace kiln {

void check_accumulation(int64_t global_batch, int world, int64_t n) {
  KILN_CHECK(global_batch % (world * n) == 0, "config: data.batch_size = ", global_batch,
             " (the global batch of an optimizer step) must divide by ", world, " rank(s) x train.accumulate = ", n,
             " micro-batches = ", world * n, "; accepted: a data.batch_size that is a multiple of ", world * n,
             ", or a train.accumulate that divides ", global_batch / world, " (the batch per rank)");
}

int64_t smallest_accumulation(int64_t per_rank_batch, int64_t max_micro_batch) {
  KILN_CHECK(per_rank_batch >= 1, "accumulation: a batch per rank of ", per_rank_batch);
  KILN_CHECK(max_micro_batch >= 1, "train.accumulate = \"auto\": not even a micro-batch of 1 sample fits in memory; "
             "lower data.batch_size is no help here: use a smaller model or input, or more memory (train.autobatch_fraction)");
  for (int64_t n = 1; n <= per_rank_batch; ++n)
    if (per_rank_batch % n == 0 && per_rank_batch / n <= max_micro_batch) return n;
  return per_rank_batch;  // unreachable: n = per_rank_batch gives micro-batches of 1
}

AccumulationPlan plan_accumulation(const std::function<double(int64_t)>& probe, double free_bytes, double fraction,
                                   int64_t per_rank_batch) {
  AutoBatchOptions ao;
  ao.fraction = fraction;
  ao.max_batch = per_rank_batch;
  ao.probes.clear();
  for (int64_t b : {8, 16, 32, 64})
    if (b <= per_rank_batch) ao.probes.push_back(b);
  if (ao.probes.size() < 2) ao.probes = {1, std::max<int64_t>(2, per_rank_batch)};
  AccumulationPlan p;
  p.autobatch = auto_batch(probe, free_bytes, ao);
  p.n = smallest_accumulation(per_rank_batch, p.autobatch.batch);
  p.micro_batch = per_rank_batch / p.n;
  p.report = p.autobatch.report() + "\naccumulate: \"auto\": a micro-batch of up to " +
             std::to_string(p.autobatch.batch) + " fits; batch " + std::to_string(per_rank_batch) +
             " per rank = " + std::to_string(p.n) + " micro-batch(es) of " + std::to_string(p.micro_batch);
  return p;
}

std::vector<int64_t> micro_batch_sizes(int64_t batch, int64_t n) {
  std::vector<int64_t> out;
  const int64_t k = std::min(batch, n);
  for (int64_t i = 0; i < k; ++i) out.push_back(batch / k + (i < batch % k ? 1 : 0));
  return out;
}

Batch micro_batch(const Batch& b, int64_t start, int64_t n) {
  KILN_CHECK(start >= 0 && n >= 1 && start + n <= b.size(), "micro_batch: samples [", start, ", ", start + n,
             ") of a batch of ", b.size());
  Batch m;
  m.images = b.images.slice(0, start, start + n).contiguous();
  m.labels = b.labels.slice(0, start, start + n).contiguous();
  m.indices.assign(b.indices.begin() + start, b.indices.begin() + start + n);
  const int64_t real = b.size() - b.padding;  // the padding is at the end
  m.padding = std::clamp<int64_t>(start + n - real, 0, n);
  m.epoch = b.epoch;
  m.index = b.index;
  return m;
}

}  // namespace kiln
