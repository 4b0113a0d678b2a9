// train.best_metric's and train.early_stopping's comparisons and lines (tools/engine/metric_watch.h).
#include "tools/engine/metric_watch.h"

#include <cstdio>

#include "core/check.h"

namespace kiln {

double metric_value(const TrainResult& r, const std::string& metric) {
  if (metric == "top1") return r.val_top1;
  if (metric == "top5") return r.val_top5;
  if (metric == "loss") return r.val_loss;
  if (metric == "ema_top1") return r.ema_val_top1;
  if (metric == "ema_top5") return r.ema_val_top5;
  if (metric == "ema_loss") return r.ema_val_loss;
  KILN_FAIL("validation metric \"", metric, "\" is not one of top1, top5, loss, ema_top1, ema_top5, ema_loss");
}

bool lower_is_better(const std::string& metric) { return metric == "loss" || metric == "ema_loss"; }

bool improves(const MetricRecord& rec, const std::string& metric, double value, double min_delta) {
  if (rec.metric != metric) return true;
  return lower_is_better(metric) ? value < rec.best - min_delta : value > rec.best + min_delta;
}

bool update_record(MetricRecord& rec, const std::string& metric, double value, int64_t epoch, double min_delta) {
  if (!improves(rec, metric, value, min_delta)) return false;
  rec = MetricRecord{metric, value, epoch};
  return true;
}

std::string metric_label(const std::string& metric) {
  const bool ema = metric.rfind("ema_", 0) == 0;
  return (ema ? "ema " : "val ") + metric.substr(ema ? 4 : 0);
}

std::string metric_text(const std::string& metric, double value) {
  char buf[64];
  if (lower_is_better(metric)) std::snprintf(buf, sizeof buf, "%.4f", value);
  else std::snprintf(buf, sizeof buf, "%.2f%%", 100 * value);
  return buf;
}

int64_t epochs_without_improvement(const MetricRecord& rec, int64_t epochs_done) { return epochs_done - rec.epoch; }

bool early_stop_due(const EarlyStoppingOptions& o, const MetricRecord& rec, int64_t epochs_done) {
  return o.enabled() && rec.metric == o.metric && epochs_without_improvement(rec, epochs_done) >= o.patience;
}

std::string early_stop_reason(const EarlyStoppingOptions& o, const MetricRecord& rec, int64_t epochs_done) {
  char delta[64] = "";
  if (o.min_delta > 0) std::snprintf(delta, sizeof delta, " by more than %g", o.min_delta);
  const int64_t n = epochs_without_improvement(rec, epochs_done);
  return metric_label(o.metric) + " has not improved" + delta + " for " + std::to_string(n) + " epoch" +
         (n == 1 ? "" : "s") + " (best " + metric_text(o.metric, rec.best) +
         (rec.epoch > 0 ? " at epoch " + std::to_string(rec.epoch) : std::string()) + ")";
}

}  // namespace kiln
