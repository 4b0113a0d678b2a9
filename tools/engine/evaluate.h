// The evaluation pass of `kiln train` and `kiln eval`: one pass over a loader's epoch in evaluation
// mode, counting the loss, top-1 and top-5 hits and optionally the confusion matrix; padded samples
// (a sharded loader's last batch) count once. Counts are this rank's; the callers sum them over ranks.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/comm.h"
#include "data/loader.h"
#include "layers/module.h"

namespace kiln {

struct EvalCounts {
  double loss_sum = 0, top1 = 0, top5 = 0, samples = 0;
  bool abandoned = false;  // `stop` said so before the last batch: the counts are partial
};

// The progress line of an evaluation ("val 3/10 [####----]  12/40  top1 71.3%  5120 img/s  0:04 eta 0:09"):
// redrawn on a terminal and erased at the end (the caller prints the result); otherwise a plain
// line every 30 seconds.
struct EvalProgress {
  std::string phase = "val";  // "val", "ema"
  int64_t epoch = 0, epochs = 0;  // 1-based, as the training line shows them
  bool tty = false;
};

// `tta`: "none", or "flip" (tools/deploy/tta.h). `confusion`, when given, is K x K and gains [label][prediction].
// `stop`, when given, is asked before each batch (its index); true abandons the pass (a training run's
// interrupt: tools/engine/interrupt.h). Leaves the model in training mode.
EvalCounts run_eval(Module& model, DataLoader& loader, Device device, DType compute, int64_t epoch,
                    int64_t num_classes, std::vector<std::vector<int64_t>>* confusion, const std::string& tta,
                    const EvalProgress* progress = nullptr, const std::function<bool(int64_t batch)>& stop = {});

// The confusion matrix summed over ranks (every rank evaluates its shard).
void all_reduce_confusion(Communicator& comm, std::vector<std::vector<int64_t>>& confusion);

}  // namespace kiln
