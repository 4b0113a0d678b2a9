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
     << static_cast<int64_t>(target_bytes / (1 << 20)) << " MiB";
  for (int64_t b : backed_off) os << "; batch " << b << " did not fit, backed off";
  os << " -> batch " << batch;
  if (backed_off.empty() && batch == max_batch && line_batch > max_batch)
    os << " (the cap; the line allows " << line_batch << ")";
  if (checked_peak_bytes > 0)
    os << " (measured " << static_cast<int64_t>(checked_peak_bytes / (1 << 20)) << " MiB, "
       << static_cast<int64_t>(100 * checked_peak_bytes / target_bytes + 0.5) << "% of the target)";
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
  r.line_batch = static_cast<int64_t>(std::min(std::floor(b), 1e15));
  r.max_batch = opt.max_batch;
  auto round = [&](int64_t v) {
    v = std::clamp(v, opt.min_batch, opt.max_batch);
    if (opt.multiple_of > 1) v = std::max(opt.multiple_of, v / opt.multiple_of * opt.multiple_of);
    return v;
  };
  int64_t batch = round(static_cast<int64_t>(std::floor(b)));
  // Run the chosen batch for real (unless a probe already did): back off until it fits the target.
  const double slack = 1.02;  // measurement noise, not a cliff
  for (int tries = 0;; ++tries) {
    double p = -1;
    bool probed = false;
    for (auto& [mb, mp] : r.measured)
      if (mb == batch) probed = true, p = mp;
    if (!probed) p = peak_bytes(batch);
    if (p >= 0 && p <= r.target_bytes * slack) {
      r.checked_peak_bytes = p;
      break;
    }
    r.backed_off.push_back(batch);
    const int64_t smaller = round(p < 0 ? batch * 3 / 4 : static_cast<int64_t>(std::floor(batch * r.target_bytes / p * 0.98)));
    KILN_CHECK(tries < 12 && smaller < batch, "AutoBatch: batch ", batch, p < 0 ? " ran out of memory" : " overshot the target",
               " and no smaller batch (at least ", opt.min_batch, ", a multiple of ", opt.multiple_of,
               ") is left to try; ", r.report());
    batch = smaller;
  }
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
