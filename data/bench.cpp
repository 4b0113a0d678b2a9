// Data-loading throughput (see bench.h).
#include "data/bench.h"

#include <chrono>

#include "core/check.h"

namespace kiln {

DataBenchResult bench_loader(DataLoader& loader, int64_t batches, int64_t warmup) {
  KILN_CHECK(batches > 0 && warmup >= 0, "bench_loader: batches must be > 0 and warmup >= 0, got ", batches, " and ",
             warmup);
  int64_t epoch = 0;
  loader.start_epoch(epoch);
  Batch b;
  auto take = [&] {
    while (!loader.next(b)) loader.start_epoch(++epoch);
    return b.size();
  };
  for (int64_t i = 0; i < warmup; ++i) take();
  loader.reset_stats();
  DataBenchResult r;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < batches; ++i) r.images += take();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.batches = batches;
  r.images_per_second = r.seconds > 0 ? static_cast<double>(r.images) / r.seconds : 0.0;
  r.wait_seconds = loader.stats().wait_seconds;
  loader.stop();
  return r;
}

DataBenchResult bench_data(const DataConfig& config, int64_t batches, int64_t warmup) {
  auto loader = make_loader(config, Split::train);
  return bench_loader(*loader, batches, warmup);
}

}  // namespace kiln
