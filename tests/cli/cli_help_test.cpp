// `kiln <command> --help` and `-h` for every command the dispatchers accept, taken from the command
// tables (command_names(), tools/cli/cli.cpp), so a new command is covered without editing this test:
// usage on stdout, exit 0, nothing on stderr, nothing written; and `kiln --help` names every command.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/cli/commands.h"
#include "../kiln_process.h"

namespace fs = std::filesystem;

namespace {

using kiln::testing::KilnRun;

KilnRun run_kiln(const fs::path& cwd, const std::string& args) { return kiln::testing::run_kiln_in(cwd, args); }


fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_cli_help_" + std::to_string(getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

bool is_group(const std::string& name, const std::vector<std::string>& names) {
  return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(name + " ", 0) == 0; });
}

}  // namespace

TEST(CliHelp, TheTablesHoldEveryKnownCommand) {
  const std::vector<std::string> names = kiln::cli::command_names();
  for (const char* want : {"train", "eval", "info", "bench", "bench matmul", "bench conv", "bench train",
                           "bench checkpoint", "bench winograd", "bench data", "data", "data export"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
}

TEST(CliHelp, EveryCommandAnswersHelpWithItsUsageAndDoesNothingElse) {
  const std::vector<std::string> names = kiln::cli::command_names();
  ASSERT_FALSE(names.empty());
  for (const std::string& name : names) {
    for (const char* flag : {"--help", "-h"}) {
      SCOPED_TRACE("kiln " + name + " " + flag);
      const fs::path dir = fresh_dir("cmd");
      KilnRun r = run_kiln(dir, name + " " + flag);
      EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
      EXPECT_EQ(r.err, "");
      // The usage names the command itself: "usage: kiln bench train [model=...]", or for a group
      // "usage: kiln bench <command> ..." and the group's commands.
      const std::string head = "usage: kiln " + name;
      ASSERT_EQ(r.out.rfind(head, 0), 0u) << r.out;
      EXPECT_TRUE(r.out[head.size()] == ' ' || r.out[head.size()] == '\n') << r.out;
      EXPECT_EQ(r.out.back(), '\n');
      if (is_group(name, names))
        for (const std::string& sub : names)
          if (sub.rfind(name + " ", 0) == 0) {
            EXPECT_NE(r.out.find("  " + sub + " "), std::string::npos) << sub;
          }
      EXPECT_TRUE(fs::is_empty(dir)) << "kiln " << name << " " << flag << " wrote into its working folder";
    }
  }
}

TEST(CliHelp, KilnHelpListsEveryCommand) {
  const std::vector<std::string> names = kiln::cli::command_names();
  for (const char* flag : {"--help", "-h", "help"}) {
    const fs::path dir = fresh_dir("top");
    KilnRun r = run_kiln(dir, flag);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("usage: kiln <command>", 0), 0u) << r.out;
    for (const std::string& name : names) {
      if (is_group(name, names)) continue;  // listed through its commands
      // "  bench train [model=...]   what it does": the name starts a line of the listing.
      const std::string line = "\n  " + name;
      size_t at = r.out.find(line);
      ASSERT_NE(at, std::string::npos) << "kiln " << flag << " does not list '" << name << "':\n" << r.out;
      const char next = r.out[at + line.size()];
      EXPECT_TRUE(next == ' ' || next == '\n') << name;
    }
    EXPECT_TRUE(fs::is_empty(dir));
  }
  // No arguments: the same listing, and exit 1 (nothing was asked for).
  KilnRun none = run_kiln(fresh_dir("none"), "");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_EQ(none.out, run_kiln(fresh_dir("top"), "--help").out);
}

TEST(CliHelp, VersionIsTheProjects) {
  for (const char* flag : {"--version", "-V"}) {
    KilnRun r = run_kiln(fresh_dir("version"), flag);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out, std::string("kiln ") + KILN_PROJECT_VERSION + "\n");
  }
  KilnRun info = run_kiln(fresh_dir("version"), "info");
  EXPECT_EQ(info.out.rfind(std::string("kiln ") + KILN_PROJECT_VERSION + "\n", 0), 0u) << info.out;
}

TEST(CliHelp, AMistypedCommandGetsADidYouMean) {
  KilnRun r = run_kiln(fresh_dir("typo"), "trian x.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("kiln: error: unknown command 'trian' (did you mean 'train'?); accepted: train, eval", 0), 0u) << r.err;
  r = run_kiln(fresh_dir("typo"), "bench trian");
  EXPECT_EQ(r.err.rfind("kiln: error: bench: unknown command 'trian' (did you mean 'train'?); accepted: ", 0), 0u) << r.err;
}

TEST(CliHelp, AnUnknownCommandListsTheAcceptedOnes) {
  const std::vector<std::string> names = kiln::cli::command_names();
  for (const std::string group : {"", "bench", "data"}) {
    SCOPED_TRACE("group '" + group + "'");
    const std::string prefix = group.empty() ? "" : group + " ";
    KilnRun r = run_kiln(fresh_dir("unknown"), prefix + "frobnicate x.json");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    const std::string head = "kiln: error: " + (group.empty() ? "" : group + ": ") + "unknown command 'frobnicate'; accepted: ";
    ASSERT_EQ(r.err.rfind(head, 0), 0u) << r.err;
    std::string accepted;
    for (const std::string& n : names)  // the group's own commands, in table order
      if (n.rfind(prefix, 0) == 0 && n.find(' ', prefix.size()) == std::string::npos)
        accepted += (accepted.empty() ? "" : ", ") + n.substr(prefix.size());
    EXPECT_EQ(r.err.substr(head.size(), accepted.size()), accepted) << r.err;
  }
}
