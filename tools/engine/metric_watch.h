// The validation figures that train.best_metric and train.early_stopping watch (tools/deploy/
// train_options.h), as the trainer compares them after each evaluation (epoch.cpp's end_epoch) and
// on resume (trainer.cpp): which figure a name stands for, whether a value improves on the best so
// far (TrainingState's MetricRecord, kept in the checkpoint), when early stopping is due, and the
// lines that say so. docs/training.md, "Early stopping" and "The best checkpoint".
// Tests: tests/engine/metric_watch_test.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "tools/engine/training_checkpoint.h"
#include "tools/engine/train_options.h"
#include "tools/engine/trainer.h"

namespace kiln {

// The last evaluation's figure `metric` ("top1" ... "ema_loss"): the result's val_* or ema_val_*.
double metric_value(const TrainResult& r, const std::string& metric);
// "loss" and "ema_loss": lower is better; the top-1/top-5 figures: higher.
bool lower_is_better(const std::string& metric);
// Whether `value` of `metric` improves on `rec` by more than `min_delta` (0: any strictly better
// value). A record of another metric, or none yet, is improved on by any value.
bool improves(const MetricRecord& rec, const std::string& metric, double value, double min_delta = 0);
// The record after an evaluation of epoch `epoch` (1-based): the value and epoch where it improves.
// Returns whether it did.
bool update_record(MetricRecord& rec, const std::string& metric, double value, int64_t epoch, double min_delta = 0);

// How the lines name a figure and a value: "val top1", "ema loss"; "91.23%", "0.3512".
std::string metric_label(const std::string& metric);
std::string metric_text(const std::string& metric, double value);

// The epochs since the record's best, after `epochs_done` epochs.
int64_t epochs_without_improvement(const MetricRecord& rec, int64_t epochs_done);
// Early stopping is due after `epochs_done` epochs: the record is of the options' metric and its
// best is `patience` or more epochs back.
bool early_stop_due(const EarlyStoppingOptions& o, const MetricRecord& rec, int64_t epochs_done);
// "val top1 has not improved by more than 0.001 for 5 epochs (best 91.23% at epoch 7)"
std::string early_stop_reason(const EarlyStoppingOptions& o, const MetricRecord& rec, int64_t epochs_done);

}  // namespace kiln
