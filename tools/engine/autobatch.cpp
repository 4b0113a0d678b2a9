#include "tools/engine/autobatch.h"

#include <algorithm>
#include <cmath>
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
  if (limit_batch > 0) os << " (batch " << limit_batch << " exceeds a library limit: " << limit_error << ")";
  os << " -> batch " << batch;
  if (backed_off.empty() && batch == max_batch && line_batch > max_batch)
    os << " (the cap; the line allows " << line_batch << ")";
  if (checked_peak_bytes > 0)
    os << " (measured " << static_cast<int64_t>(checked_peak_bytes / (1 << 20)) << " MiB, "
       << static_cast<int64_t>(100 * checked_peak_bytes / target_bytes + 0.5) << "% of the target)";
  return os.str();
}

namespace {
// One probe: its peak, or -1 when it did not fit (out of memory, or over a library's size limit).
// `excess` gets the TooLargeError's excess (0 otherwise).
double run_probe(const std::function<double(int64_t)>& peak_bytes, int64_t b, AutoBatchResult& r, double& excess) {
  excess = 0;
  try {
    return peak_bytes(b);
  } catch (const TooLargeError& e) {
    if (r.limit_batch == 0 || b < r.limit_batch) {
      r.limit_batch = b;
      r.limit_error = e.what();
    }
    excess = e.excess();
    return -1;
  } catch (const OutOfMemoryError&) {
    return -1;
  }
}
}  // namespace

AutoBatchResult auto_batch(const std::function<double(int64_t)>& peak_bytes, double free_bytes,
                           const AutoBatchOptions& opt) {
  KILN_CHECK(opt.fraction > 0 && opt.fraction <= 1, "AutoBatch fraction ", opt.fraction, " must be in (0, 1]");
  KILN_CHECK(free_bytes > 0, "AutoBatch: no free memory reported");
  AutoBatchResult r;
  r.target_bytes = free_bytes * opt.fraction;
  for (int64_t b : opt.probes) {
    if (b > opt.max_batch) break;
    double excess = 0;
    double p = run_probe(peak_bytes, b, r, excess);
    if (p < 0) break;  // out of memory: larger probes will not fit either
    r.measured.push_back({b, p});
    if (p > r.target_bytes) break;  // already past the target: no need to go further
  }
  KILN_CHECK(!r.measured.empty(), "AutoBatch: even batch ", opt.probes.front(),
             (r.limit_batch > 0 ? " exceeds a library limit (" + r.limit_error + ")" : std::string(" ran out of memory")),
             "; the model does not fit on this device with ", free_bytes / (1 << 20), " MiB free");
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
    double p = -1, excess = 0;
    bool probed = false;
    for (auto& [mb, mp] : r.measured)
      if (mb == batch) probed = true, p = mp;
    if (!probed) p = run_probe(peak_bytes, batch, r, excess);
    if (p >= 0 && p <= r.target_bytes * slack) {
      r.checked_peak_bytes = p;
      break;
    }
    r.backed_off.push_back(batch);
    // Over a library limit by a known factor: the largest batch within it (sizes grow with the batch).
    int64_t next = excess > 1 ? static_cast<int64_t>(std::floor(batch / excess + 1e-6))
                   : p < 0    ? batch * 3 / 4
                              : static_cast<int64_t>(std::floor(batch * r.target_bytes / p * 0.98));
    const int64_t smaller = round(std::min(next, batch - 1));
    KILN_CHECK(tries < 12 && smaller < batch, "AutoBatch: batch ", batch,
               p < 0 ? (excess > 0 ? " exceeds a library limit" : " ran out of memory") : " overshot the target",
               " and no smaller batch (at least ", opt.min_batch, ", a multiple of ", opt.multiple_of,
               ") is left to try; ", r.report());
    batch = smaller;
  }
  r.batch = batch;
  return r;
}


}  // namespace kiln
