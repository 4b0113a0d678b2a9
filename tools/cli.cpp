// Command dispatch for the `kiln` executable.
#include <iostream>

#include "core/check.h"
#include "tools/commands.h"

namespace kiln::cli {

static const char* kUsage =
    "usage: kiln <command> [arguments]\n"
    "commands:\n"
    "  train CONFIG [key=value ...]   train a model; e.g. epochs=3 batch=128 device=0 lr=0.05\n"
    "  eval CONFIG weights=FILE       top-1/top-5 and a confusion matrix on the validation split\n"
    "  info                      devices and library versions\n"
    "  bench matmul [n=4096]     CPU vs GPU matrix product table (fp32, bf16)\n"
    "  bench conv                3x3 64->64 conv forward+backward on (32,32,32,64)\n"
    "  bench checkpoint          time and peak memory per step for each checkpoint policy (ResNet-50)\n"
    "  bench data CONFIG [threads=N] [batches=N]   images/s of the config's input pipeline\n"
    "  data export CONFIG|FOLDER out=DIR [format=png|jpeg] [split=train|val|both] [limit=N]\n"
    "                            write a data source as an image folder DIR/<split>/<class>/<index>.png\n";

bool wants_help(const Args& args, const char* usage) {
  if (args.empty() || (args[0] != "-h" && args[0] != "--help" && args[0] != "help")) return false;
  std::cout << usage;
  return true;
}

int run(const Args& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 1 : 0;
  }
  const std::string& cmd = args[0];
  Args rest(args.begin() + 1, args.end());
  if (cmd == "train") return cmd_train(rest);
  if (cmd == "eval") return cmd_eval(rest);
  if (cmd == "info") return cmd_info(rest);
  if (cmd == "bench") return cmd_bench(rest);
  if (cmd == "data") return cmd_data(rest);
  if (cmd == "export") return cmd_export(rest);
  KILN_FAIL("unknown command '", cmd, "'; accepted: train, eval, info, bench, data (see kiln --help)");
}

}  // namespace kiln::cli
