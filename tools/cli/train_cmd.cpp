// `kiln train CONFIG|RUN [key=value ...]` (RUN: resume that run) and `kiln eval CONFIG|RUN weights=FILE [out=DIR] [tta=none|flip] [key=value ...]`
// (the classification report: tools/engine/report.h, docs/reports.md). Tests: tests/engine/report_test.cpp.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <filesystem>
#include <iostream>

#include "core/version.h"
#include "tools/cli/commands.h"
#include "tools/cli/config_schema.h"
#include "tools/deploy/checkpoint.h"
#include "tools/deploy/config.h"
#include "tools/engine/interrupt.h"
#include "tools/engine/metrics.h"
#include "tools/deploy/model_io.h"
#include "tools/engine/mpi_comm.h"
#include "tools/engine/report.h"
#include "tools/engine/train_api.h"
#include "tools/engine/trainer.h"

namespace fs = std::filesystem;

namespace kiln::cli {

namespace {
json config_from_args(const char* command, const Args& args, const char* usage, std::string* weights) {
  KILN_CHECK(!args.empty() && args[0].find('=') == std::string::npos, usage);
  std::vector<std::string> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    if (weights && args[i].rfind("weights=", 0) == 0) *weights = args[i].substr(8);
    else overrides.push_back(args[i]);
  }
  return load_config_with(args[0], overrides, std::string("kiln ") + command);  // CONFIG may be a run folder
}

// Where `kiln eval` writes its report without out=: the run folder `first` is, else the run folder
// the weights lie in (the weights path itself, its parent or grandparent, as written: runs/x,
// runs/x/best, runs/x/last.safetensors, runs/x/last-12/last.safetensors), else a new folder
// <train.runs_dir>/<name>-eval (-eval-2, ...).
std::string eval_output_folder(const std::string& first, const std::string& weights, const json& config) {
  if (is_run_folder(first)) return first;
  fs::path p = fs::path(weights).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "runs/x/" -> "runs/x"
  for (int up = 0; up < 3 && !p.empty(); ++up, p = p.parent_path())
    if (is_run_folder(p)) return p.string();
  const TrainOptions t = TrainOptions::from_json(config.value("train", json::object()), "train");
  return make_run_dir(t.runs_dir, config.value("name", std::string("run")) + "-eval");
}
}  // namespace

int cmd_train(const Args& args) {
  static const char* kUsage =
      "usage: kiln train CONFIG|RUN [key=value ...]\n"
      "  CONFIG starts a new run (e.g. kiln train configs/fashion_mnist_cnn.json epochs=3 device=cpu);\n"
      "  RUN, a run folder such as runs/<name>, resumes that run from its last checkpoint, in place\n"
      "  (epochs=N raises the target of a finished run); so does resume=RUN|CHECKPOINT without a config.\n"
      "\n"
      "command line (after CONFIG|RUN):\n"
      "  key=value          sets any key below by its dotted path: optim.lr=0.05, train.max_steps_per_epoch=10,\n"
      "                     data.train_transforms.0.p=0.3 (a number indexes a list); the value is JSON when it\n"
      "                     parses as JSON (3, true, [0.9, 0.99]), else text (device=0,1)\n"
      "  short forms        epochs=N (train.epochs), batch=N (data.batch_size; -1: AutoBatch), device=cpu|0|0,1\n"
      "                     (train.device), lr=X (optim.lr), precision=fp32|bf16|fp16|auto, workers=N\n"
      "                     (data.workers), seed=N (train.seed), resume=RUN|CHECKPOINT (train.resume),\n"
      "                     name=NAME, checkpoint=none|blocks|every:K (train.checkpoint), model=NAME (model.name)\n"
      "  kiln config show CONFIG [key=value ...] prints the config resolved, every default filled in.\n"
      "\n"
      "Config keys (docs/config.md; also kiln config keys):";
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help" || args[0] == "help")) {
    std::cout << kUsage << "\n" << schema_text();
    return 0;
  }
  const std::optional<KeyValue> first = args.empty() ? std::nullopt : split_key_value(args[0]);
  KILN_CHECK(!args.empty() && (args[0].find('=') == std::string::npos ||
                               (first && (first->key == "resume" || first->key == "train.resume"))), kUsage);
  // CONFIG, RUN or resume=RUN|CHECKPOINT first: kiln::train's rules (tools/engine/train_api.h).
  const json config = training_config(json(args[0]), Args(args.begin() + 1, args.end()), "kiln train");
  SignalWatch signals;  // SIGINT/SIGTERM: save and stop; SIGUSR1: save (tools/engine/interrupt.h)
  TrainResult r = train(config);
  if (r.interrupted) return 128 + r.interrupted;  // as the shell reports a death by that signal
  if (!r.run_dir.empty()) {
    std::printf("final: val top1 %.2f%%  top5 %.2f%%  loss %.4f  (%.0f img/s)\n", 100 * r.val_top1, 100 * r.val_top5,
                r.val_loss, r.images_per_s);
    if (r.ema_val_top1 > 0)
      std::printf("final: ema top1 %.2f%%  top5 %.2f%%  loss %.4f\n", 100 * r.ema_val_top1, 100 * r.ema_val_top5,
                  r.ema_val_loss);
    std::printf("memory: peak %.0f MiB during training, above the weights", r.peak_bytes / (1 << 20));
    if (r.autobatch_target_bytes > 0)
      std::printf(" (AutoBatch's target %.0f MiB: %.0f%%)", r.autobatch_target_bytes / (1 << 20),
                  100 * r.peak_bytes / r.autobatch_target_bytes);
    std::printf("\n");
  }
  return 0;
}

int cmd_eval(const Args& args) {
  static const char* kUsage =
      "usage: kiln eval CONFIG weights=FILE | RUN [weights=FILE] [out=DIR] [tta=none|flip] [key=value ...]\n"
      "  Evaluates the weights (a RUN's own: its best checkpoint, else its last) on the validation split; prints top-1/top-5, the loss and the per-class\n"
      "  report, and writes report.csv, report.json, confusion.csv, confusion.png and confused_pairs.csv\n"
      "  (docs/reports.md) into DIR; without out=: the run folder when RUN is one or the weights lie in\n"
      "  one (runs/<name>/best, runs/<name>/last-12/last.safetensors), else a new runs/<name>-eval.\n"
      "  tta=flip (train.tta): each prediction is the mean of the softmax of the image and of its\n"
      "  left-right mirror (docs/mixup_tta.md); the printed figures and the report files use it.";
  if (wants_help(args, kUsage)) return 0;
  std::string weights, out;
  Args rest;
  for (const std::string& a : args) {
    if (a.rfind("out=", 0) == 0) out = a.substr(4);
    else if (a.rfind("tta=", 0) == 0) rest.push_back("train." + a);  // checked with train.tta's choices
    else rest.push_back(a);
  }
  json config = config_from_args("eval", rest, kUsage, &weights);
  if (weights.empty() && is_run_folder(rest[0])) weights = rest[0];  // the run's weights (run_weights_checkpoint)
  KILN_CHECK(!weights.empty(), "kiln eval ", rest[0], " needs weights=FILE (a .safetensors file, a checkpoint or a run "
             "folder such as runs/<name>): a config file has no weights of its own");
  EvalResult r = evaluate(config, weights);
  std::printf("%lld images: top1 %.2f%%  top5 %.2f%%  loss %.4f\n\n", static_cast<long long>(r.samples), 100 * r.top1,
              100 * r.top5, r.loss);
  ClassificationReport rep = classification_report(r.confusion, r.class_names);
  std::printf("%s", format_report(rep).c_str());
  if (out.empty()) out = eval_output_folder(rest[0], weights, config);
  write_report_files(rep, out);
  std::printf("report files (report.csv, report.json, confusion.csv, confusion.png, confused_pairs.csv) in %s\n",
              out.c_str());
  return 0;
}

}  // namespace kiln::cli
