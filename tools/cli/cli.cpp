// Command dispatch for the `kiln` executable. The command tables (kCommands here, bench_commands() and
// data_commands() for the groups) are the one list of commands: the dispatch, `kiln --help`, the
// "accepted:" of an unknown command and tests/cli/cli_help_test.cpp all read them.
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/check.h"
#include "core/json_util.h"  // closest_match
#include "core/registry.h"
#include "core/version.h"
#include "tools/cli/cli.h"
#include "tools/cli/commands.h"
#include "tools/engine/mpi_comm.h"
#include "tools/engine/run_lock.h"  // set_resume_command

namespace kiln::cli {

namespace {

const std::vector<Command>& top_commands() {
  static const std::vector<Command> kCommands = {
      {"train", "CONFIG|RUN [key=value ...]", "train a model (RUN: resume that run); e.g. epochs=3 batch=128 device=0",
       cmd_train},
      {"eval", "CONFIG weights=FILE", "top-1/top-5 and a confusion matrix on the validation split", cmd_eval},
      {"predict", "RUN|CONFIG [weights=FILE] INPUT... [topk=5] [out=FILE.csv|FILE.jsonl]",
       "top-k classes of image files, folders or .txt image lists", cmd_predict},
      {"export", "RUN|CONFIG [weights=FILE|init=random] format=onnx out=FILE [reference=FILE]",
       "the model as ONNX (opset 13, dynamic batch, preprocessing in the metadata)", cmd_export},
      {"sweep", "CONFIG|SWEEP_FILE|runs/<sweep> [key=v1,v2 ...] [seeds=0,1,2]",
       "train variants x seeds, resumable, with a table of mean ± std (sweep show runs/<sweep>: the table)", cmd_sweep},
      {"compare", "RUN RUN ... [out=FILE.png]", "the config keys that differ, final metrics side by side, overlaid curves",
       cmd_compare},
      {"info", "", "devices and library versions", cmd_info},
      {"bench", "", "", cmd_bench, &bench_commands()},
      {"data", "", "", cmd_data, &data_commands()},
      {"config", "", "", cmd_config, &config_commands()},
  };
  return kCommands;
}

// "  name args" padded to a column, then what it does (on the next line when the left part is long).
void list_commands(std::ostream& os, const std::string& prefix, const std::vector<Command>& table) {
  for (const Command& c : table) {
    if (c.subcommands) {
      list_commands(os, prefix + c.name + " ", *c.subcommands);
      continue;
    }
    std::string left = "  " + prefix + c.name + (*c.args ? std::string(" ") + c.args : "");
    constexpr size_t kColumn = 40;
    if (left.size() + 1 > kColumn) left += "\n" + std::string(kColumn, ' ');
    else left.resize(kColumn, ' ');
    os << left << c.what << "\n";
  }
}

void add_names(std::vector<std::string>& out, const std::string& prefix, const std::vector<Command>& table) {
  for (const Command& c : table) {
    out.push_back(prefix + c.name);
    if (c.subcommands) add_names(out, prefix + c.name + " ", *c.subcommands);
  }
}

}  // namespace

bool wants_help(const Args& args, const char* usage) {
  if (args.empty() || (args[0] != "-h" && args[0] != "--help" && args[0] != "help")) return false;
  const std::string u = usage;
  std::cout << u << (u.empty() || u.back() != '\n' ? "\n" : "");
  return true;
}

std::string group_usage(const std::string& group) {
  std::ostringstream os;
  os << "usage: kiln " << (group.empty() ? "" : group + " ") << "<command> [arguments]   ('kiln "
     << (group.empty() ? "" : group + " ") << "<command> --help' for one command's arguments"
     << (group.empty() ? "; kiln --version" : "") << ")\ncommands:\n";
  const std::vector<Command>* table = &top_commands();
  for (const Command& c : top_commands())
    if (c.name == group && c.subcommands) table = c.subcommands;
  list_commands(os, group.empty() ? "" : group + " ", *table);
  return os.str();
}

std::vector<std::string> command_names() {
  std::vector<std::string> out;
  add_names(out, "", top_commands());
  return out;
}

int dispatch(const std::vector<Command>& table, const Args& args, const std::string& group) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << group_usage(group);
    return args.empty() ? 1 : 0;
  }
  Args rest(args.begin() + 1, args.end());
  std::string accepted;
  std::vector<std::string> names;
  for (const Command& c : table) {
    if (args[0] == c.name) return c.run(rest);
    accepted += (accepted.empty() ? "" : ", ") + std::string(c.name);
    names.emplace_back(c.name);
  }
  const std::string near = closest_match(args[0], names);
  KILN_FAIL(group.empty() ? "" : group + ": ", "unknown command '", args[0], "'",
            near.empty() ? "" : " (did you mean '" + near + "'?)", "; accepted: ", accepted, " (see kiln ",
            group.empty() ? "" : group + " ", "--help)");
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  set_resume_command(std::filesystem::path(argc > 0 && argv[0] ? argv[0] : "kiln").filename().string() + " train");
  try {
    check_registrations();  // a component registered twice (KILN_REGISTER) fails here, naming both places
    return run(args);
  } catch (const std::exception& e) {
    std::cerr << "kiln: error: " << e.what() << std::endl;
    abort_job_if_mpi(1);  // bring the other ranks down now rather than at their timeout
    return 1;
  }
}

int run(const Args& args) {
  if (args.size() == 1 && (args[0] == "--version" || args[0] == "-V")) {
    std::cout << "kiln " << kiln_version() << "\n";
    return 0;
  }
  return dispatch(top_commands(), args, "");
}

}  // namespace kiln::cli
