#include "tools/autobatch.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/check.h"

namespace kiln {

std::string AutoBatchResult::report() const {
  std::ostringstream os;
  os << "AutoBatch: measured";
  for (auto& [b, p] : measured) os << " " << b << "->" << static_cast<int64_t>(p / (1 << 20)) << "MiB";
  os << "; fit " << static_cast<int64_t>(fixed_bytes / (1 << 20)) << " MiB + "
     << static_cast<int64_t>(per_sample_bytes / (1 << 10)) << " KiB/sample; target "
     << static_cast<int64_t>(target_bytes / (1 << 20)) << " MiB -> batch " << batch;
  return os.str();
}

AutoBatchResult auto_batch(const std::function<double(int64_t)>& peak_bytes, double free_bytes,
                           const AutoBatchOptions& opt) {
  KILN_CHECK(opt.fraction > 0 && opt.fraction <= 1, "AutoBatch fraction ", opt.fraction, " must be in (0, 1]");
  KILN_CHECK(free_bytes > 0, "AutoBatch: no free memory reported");
  AutoBatchResult r;
  r.target_bytes = free_bytes * opt.fraction;
  for (int64_t b : opt.probes) {
    if (b > opt.max_batch) break;
    double p = peak_bytes(b);
    if (p < 0) break;  // out of memory: larger probes will not fit either
    r.measured.push_back({b, p});
    if (p > r.target_bytes) break;  // already past the target: no need to go further
  }
  KILN_CHECK(!r.measured.empty(), "AutoBatch: even batch ", opt.probes.front(),
             " ran out of memory; the model does not fit on this device with ", free_bytes / (1 << 20), " MiB free");
  if (r.measured.size() == 1) {  // one point: assume no fixed part (conservative)
    r.fixed_bytes = 0;
    r.per_sample_bytes = r.measured[0].second / r.measured[0].first;
  } else {  // least squares
    double n = static_cast<double>(r.measured.size()), sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (auto& [b, p] : r.measured) {
      sx += b;
      sy += p;
      sxx += static_cast<double>(b) * b;
      sxy += b * p;
    }
    r.per_sample_bytes = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    r.fixed_bytes = (sy - r.per_sample_bytes * sx) / n;
    if (r.per_sample_bytes <= 0) {  // noise: fall back to the largest probe's average
      r.per_sample_bytes = r.measured.back().second / r.measured.back().first;
      r.fixed_bytes = 0;
    }
  }
  double b = (r.target_bytes - r.fixed_bytes) / r.per_sample_bytes;
  int64_t batch = static_cast<int64_t>(std::floor(b));
  batch = std::clamp(batch, opt.min_batch, opt.max_batch);
  if (opt.multiple_of > 1) batch = std::max(opt.multiple_of, batch / opt.multiple_of * opt.multiple_of);
  r.batch = batch;
  return r;
}

double cpu_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 4.0 * (1 << 30);
}

}  // namespace kiln
