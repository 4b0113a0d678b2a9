// Data-loading throughput, for `kiln bench data` and for checking that loading keeps ahead of
// training. The consumer does nothing with the batches, so the figure is the loader's own ceiling.
// Tests: tests/data/config_test.cpp (that it runs; no timing is asserted).
#pragma once
#include <cstdint>

#include "data/config.h"
#include "data/loader.h"

namespace kiln {

struct DataBenchResult {
  int64_t batches = 0;             // timed batches
  int64_t images = 0;              // timed images
  double seconds = 0.0;            // wall time of the timed batches
  double images_per_second = 0.0;
  double wait_seconds = 0.0;       // of `seconds`, time next() waited (or loaded, with 0 workers)
};

// Takes `warmup` batches (worker start, first allocations), then times `batches` more, starting
// new epochs (0, 1, ...) whenever one ends.
DataBenchResult bench_loader(DataLoader& loader, int64_t batches, int64_t warmup = 5);

// The same on the training loader of a data config (opens the dataset first, untimed).
DataBenchResult bench_data(const DataConfig& config, int64_t batches, int64_t warmup = 5);

}  // namespace kiln
