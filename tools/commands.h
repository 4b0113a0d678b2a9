// The CLI's commands. Each takes the arguments after its name and returns the exit code; errors
// are thrown as kiln::Error and printed by main().
#pragma once
#include <string>
#include <vector>

#include "core/device.h"

namespace kiln::cli {

using Args = std::vector<std::string>;

// True when the arguments ask for help (any of -h, --help, help as the first argument); then
// `usage` has been printed to stdout and the command returns 0. Every command starts with
//   if (wants_help(args, kUsage)) return 0;   tools/cli.cpp
bool wants_help(const Args& args, const char* usage);

int cmd_info(const Args& args);   // tools/info.cpp
int cmd_bench(const Args& args);  // tools/bench.cpp
int bench_checkpoint(const Args& args);  // tools/bench_memory.cpp
// bench train's host_blocked column: "n/a" off a GPU, else 100 * blocked_s / total_s as "1.5%". tools/bench.cpp
std::string host_blocked_column(const Device& d, double blocked_s, double total_s);
// "a,b,,c" -> {"a", "b", "c"} (empty parts dropped), for comma-separated arguments. tools/bench_memory.cpp
std::vector<std::string> split_commas(const std::string& s);
int cmd_train(const Args& args);  // tools/train_cmd.cpp
int cmd_eval(const Args& args);   // tools/train_cmd.cpp
int cmd_data(const Args& args);   // tools/data_cmd.cpp
int bench_data_cmd(const Args& args);  // tools/data_cmd.cpp: `kiln bench data`
int cmd_export(const Args& args);  // tools/export_cmd.cpp: `kiln export ... format=onnx`

}  // namespace kiln::cli
