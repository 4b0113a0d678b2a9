// `kiln compare RUN RUN ... [out=FILE.png]`: the keys that differ, the final metrics side by side, the
// validation curves overlaid (tools/sweep/compare.h, docs/sweeps.md). Tests: tests/sweep/sweep_process_test.cpp.
#include <iostream>

#include "tools/cli/commands.h"
#include "tools/deploy/config.h"
#include "tools/sweep/compare.h"

namespace kiln::cli {

int cmd_compare(const Args& args) {
  static const char* kUsage =
      "usage: kiln compare RUN RUN ... [out=FILE.png]\n"
      "  The config keys whose values differ between the runs (their config.json), the final metrics side by side\n"
      "  (epochs, final and best top-1, top-5, loss, minutes, images/s), and every run's validation top-1 curve\n"
      "  overlaid in one PNG (default compare.png in the current folder).";
  if (wants_help(args, kUsage)) return 0;
  std::string out = "compare.png";
  Args runs;
  for (const std::string& a : args) {
    const std::optional<KeyValue> kv = split_key_value(a);
    if (!kv) runs.push_back(a);
    else if (kv->key == "out" && !kv->value.empty()) out = kv->value;
    else KILN_FAIL("kiln compare: argument '", a, "' is not accepted; accepted: run folders and out=FILE.png");
  }
  std::cout << sweep::compare_runs(runs, out);
  return 0;
}

}  // namespace kiln::cli
