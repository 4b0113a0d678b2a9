// `kiln train CONFIG [key=value ...]` and `kiln eval CONFIG weights=FILE [key=value ...]`.
#include <cstdio>
#include <iostream>

#include "tools/commands.h"
#include "tools/config.h"
#include "tools/mpi_comm.h"
#include "tools/trainer.h"

namespace kiln::cli {

namespace {
json config_from_args(const Args& args, const char* usage, std::string* weights) {
  KILN_CHECK(!args.empty() && args[0].find('=') == std::string::npos, usage);
  json config = load_config_file(args[0]);
  std::vector<std::string> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    if (weights && args[i].rfind("weights=", 0) == 0) *weights = args[i].substr(8);
    else overrides.push_back(args[i]);
  }
  apply_overrides(config, overrides);
  return config;
}
}  // namespace

int cmd_train(const Args& args) {
  static const char* kUsage =
      "usage: kiln train CONFIG [key=value ...]  (e.g. kiln train configs/fashion_mnist_cnn.json epochs=3 "
      "device=cpu)";
  if (wants_help(args, kUsage)) return 0;
  json config = config_from_args(args, kUsage, nullptr);
  TrainResult r = train(config);
  if (!r.run_dir.empty()) {
    std::printf("final: val top1 %.2f%%  top5 %.2f%%  loss %.4f  (%.0f img/s)\n", 100 * r.val_top1, 100 * r.val_top5,
                r.val_loss, r.images_per_s);
    std::printf("memory: peak %.0f MiB during training, above the weights", r.peak_bytes / (1 << 20));
    if (r.autobatch_target_bytes > 0)
      std::printf(" (AutoBatch's target %.0f MiB: %.0f%%)", r.autobatch_target_bytes / (1 << 20),
                  100 * r.peak_bytes / r.autobatch_target_bytes);
    std::printf("\n");
  }
  return 0;
}

int cmd_eval(const Args& args) {
  static const char* kUsage = "usage: kiln eval CONFIG weights=FILE [key=value ...]";
  if (wants_help(args, kUsage)) return 0;
  std::string weights;
  json config = config_from_args(args, kUsage, &weights);
  KILN_CHECK(!weights.empty(), "kiln eval needs weights=FILE (a .safetensors file or a run folder such as runs/<name>)");
  EvalResult r = evaluate(config, weights);
  std::printf("%lld images: top1 %.2f%%  top5 %.2f%%  loss %.4f\n", static_cast<long long>(r.samples), 100 * r.top1,
              100 * r.top5, r.loss);
  std::printf("confusion matrix (rows: true class, columns: predicted)\n     ");
  size_t k = r.confusion.size();
  for (size_t j = 0; j < k; ++j) std::printf("%6zu", j);
  std::printf("\n");
  for (size_t i = 0; i < k; ++i) {
    std::printf("%5zu", i);
    for (size_t j = 0; j < k; ++j) std::printf("%6lld", static_cast<long long>(r.confusion[i][j]));
    std::printf("\n");
  }
  return 0;
}

}  // namespace kiln::cli
