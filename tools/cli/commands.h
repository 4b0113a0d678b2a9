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
//   if (wants_help(args, kUsage)) return 0;   tools/cli/cli.cpp
bool wants_help(const Args& args, const char* usage);

// One entry of a command table: kiln's top level (tools/cli/cli.cpp) or a group's (bench, data). The
// tables are the one list of commands: dispatch, `kiln --help` and the tests read them.
struct Command {
  const char* name;  // "train", or "matmul" inside the group bench
  const char* args;  // its arguments in one short line for `kiln --help`: "CONFIG [key=value ...]"
  const char* what;  // what it does, one line
  int (*run)(const Args& args);  // called with the arguments after the name
  const std::vector<Command>* subcommands = nullptr;  // a group: its commands (run dispatches to them)
};
const std::vector<Command>& bench_commands();  // tools/cli/bench.cpp
const std::vector<Command>& data_commands();   // tools/cli/data_cmd.cpp
const std::vector<Command>& config_commands();  // tools/cli/config_cmd.cpp
// Runs the command of `table` named by args[0] with the rest; no arguments or -h/--help/help print the
// group's listing (exit code 1 and 0). An unknown name lists the accepted ones. `group`: "" for the top
// level, else the group's name ("bench"). tools/cli/cli.cpp
int dispatch(const std::vector<Command>& table, const Args& args, const std::string& group);
// "usage: kiln [group] <command> ..." and the group's commands, one line each ("" = every command).
std::string group_usage(const std::string& group);
// Every name the dispatchers accept, groups and their commands: "train", ..., "bench", "bench matmul", ...
std::vector<std::string> command_names();

int cmd_info(const Args& args);   // tools/cli/info.cpp
int cmd_bench(const Args& args);  // tools/cli/bench.cpp
int bench_checkpoint(const Args& args);  // tools/cli/bench_memory.cpp
// bench train's host_blocked column: "n/a" off a GPU, else 100 * blocked_s / total_s as "1.5%". tools/cli/bench.cpp
std::string host_blocked_column(const Device& d, double blocked_s, double total_s);
// "a,b,,c" -> {"a", "b", "c"} (empty parts dropped), for comma-separated arguments. tools/cli/bench_memory.cpp
std::vector<std::string> split_commas(const std::string& s);
int cmd_train(const Args& args);  // tools/cli/train_cmd.cpp
int cmd_eval(const Args& args);   // tools/cli/train_cmd.cpp
int cmd_data(const Args& args);   // tools/cli/data_cmd.cpp
int cmd_config(const Args& args);  // tools/cli/config_cmd.cpp: `kiln config show|keys`
int cmd_predict(const Args& args);  // tools/cli/predict_cmd.cpp
int bench_data_cmd(const Args& args);  // tools/cli/data_cmd.cpp: `kiln bench data`
int cmd_export(const Args& args);  // tools/cli/export_cmd.cpp: `kiln export ... format=onnx`
int cmd_sweep(const Args& args);    // tools/cli/sweep_cmd.cpp: `kiln sweep ...`, `kiln sweep show`
int cmd_compare(const Args& args);  // tools/cli/compare_cmd.cpp: `kiln compare RUN RUN ...`

}  // namespace kiln::cli
