// The config the data-parallel equivalence tests train (tests/engine/replicas_test.cpp on thread
// replicas, tests/mpi/mpi_test.cpp on mpirun ranks): no batch-norm and no dropout, so N replicas
// on a global batch of 32 take exactly the step of one replica on the 32. (With batch norm the
// running statistics are per replica within an epoch; every replica takes rank 0's before it
// evaluates: Replicas.EvaluationIsThatOfTheSavedBatchNormStatistics.)
#pragma once
#include <string>
#include <vector>

#include "core/json_reader.h"

namespace kiln::testing {

inline json data_parallel_config(const std::string& runs_dir, const std::string& name, double comm_timeout_s) {
  json c = json::parse(R"({
    "model": {"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1},
      {"type": "relu"},
      {"type": "max_pool2d", "kernel_size": 2},
      {"type": "flatten"},
      {"type": "linear", "in_features": 128, "out_features": 4}]},
    "data": {"source": "synthetic", "synthetic": {"size": 128, "height": 8, "width": 8, "channels": 3, "num_classes": 4},
             "train_transforms": [{"type": "horizontal_flip"}], "batch_size": 32, "workers": 1},
    "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 1e-4},
    "schedule": {"name": "cosine", "warmup_epochs": 0.5},
    "train": {"epochs": 3, "seed": 5, "plots": false}
  })");
  c["name"] = name;
  c["train"]["runs_dir"] = runs_dir;
  c["train"]["comm_timeout_s"] = comm_timeout_s;
  return c;
}

// The same tiny synthetic problem (4 classes) trained for one epoch, and the classification report's
// files a finished run or `kiln eval` writes (tools/engine/report.h): tests/engine/report_test.cpp
// and tests/cli/eval_cmd_test.cpp.
inline json tiny_report_config(const std::string& runs_dir) {
  json c = data_parallel_config(runs_dir, "tiny", 600);
  c["train"]["epochs"] = 1;
  return c;
}
inline const std::vector<std::string> kReportFiles = {"report.csv", "report.json", "confusion.csv", "confusion.png",
                                                      "confused_pairs.csv"};

}  // namespace kiln::testing
