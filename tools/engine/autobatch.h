// AutoBatch (`batch=-1`, or `batch=0.7` for a fraction): choose the batch size that fills a given
// fraction of the device's free memory. Better than guessing from anchors: it profiles whole
// training steps (forward, backward, optimizer state, loss scaling, workspaces) at a few batch
// sizes with the allocator's peak counter, fits peak = fixed + per_sample * batch by least squares,
// and takes the largest batch whose predicted peak stays within the fraction of what was free
// before the model was built. A probe that runs out of memory ends the probing and the fit uses the
// others. The chosen batch is then run once for real: if it runs out of memory or overshoots the
// target (the line missed a cliff: a workspace, another algorithm), the batch backs off in
// proportion and is run again, until one fits. A batch over a library's size limit (TooLargeError)
// does not fit either.
// Tests: tests/engine/autobatch_test.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln {

struct AutoBatchResult {
  int64_t batch = 0;
  double fixed_bytes = 0, per_sample_bytes = 0;  // the fitted line
  double target_bytes = 0;
  std::vector<std::pair<int64_t, double>> measured;  // (batch, peak bytes) per successful probe
  int64_t line_batch = 0;  // the largest batch the fitted line allows, before the cap and rounding
  int64_t max_batch = 0;   // the cap it was held to
  double checked_peak_bytes = 0;                      // the chosen batch's own measured peak
  std::vector<int64_t> backed_off;                    // batches tried after the fit that did not fit
  int64_t limit_batch = 0;  // the smallest batch that exceeded a library limit (TooLargeError), 0: none
  std::string limit_error;  // what that library reported
  std::string report() const;                         // what was measured and chosen, for the log
};

struct AutoBatchOptions {
  double fraction = 0.6;                        // of the free memory
  std::vector<int64_t> probes = {8, 16, 32, 64};  // batch sizes profiled
  int64_t min_batch = 1;
  int64_t max_batch = 4096;
  int64_t multiple_of = 1;  // e.g. the number of ranks: the global batch must divide evenly
};

// `peak_bytes(b)` runs one training step at batch b and returns the allocator's peak above the
// baseline, or a negative value when it ran out of memory; a probe that throws OutOfMemoryError
// (TooLargeError too: a library's size limit, e.g. cuDNN's 2^31 elements per tensor) also counts as
// "does not fit". After a TooLargeError that says by how much the limit was exceeded, the next try is
// the batch that stays within it. `free_bytes` is the memory available.
AutoBatchResult auto_batch(const std::function<double(int64_t)>& peak_bytes, double free_bytes,
                           const AutoBatchOptions& opt);

// Memory the CPU backend may plan with: MemAvailable from /proc/meminfo.

}  // namespace kiln
