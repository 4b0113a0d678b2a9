// `kiln eval` (tools/cli/train_cmd.cpp): the classification report (tools/engine/report.h) written
// into the run folder, into out=DIR, or into a new <runs>/<name>-eval folder; --help; the weights=
// argument named when missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/data_parallel_config.h"
#include "tests/layers/error_util.h"
#include "tests/data/data_test_util.h"  // TempDir
#include "tools/cli/commands.h"
#include "tools/engine/trainer.h"

using namespace kiln;
using kiln::testing::error_of;
namespace fs = std::filesystem;

namespace {

using kiln::testing::kReportFiles;
json tiny_config(const std::string& runs) { return kiln::testing::tiny_report_config(runs); }

}  // namespace

TEST(EvalCommand, WritesTheReportIntoTheRunOutOrANewFolder) {
  kiln::testing::TempDir dir;
  const std::string runs = dir.str();
  TrainResult r = train(tiny_config(runs), true);
  std::ifstream jf(r.run_dir + "/report.json");
  json j = json::parse(jf);

  // kiln eval CONFIG weights=<inside the run>: into the run folder.
  const std::string cfg_file = runs + "/tiny.json";
  std::ofstream(cfg_file) << tiny_config(runs).dump();
  for (const std::string& f : kReportFiles) fs::remove(r.run_dir + "/" + f);
  EXPECT_EQ(cli::cmd_eval({cfg_file, "weights=" + r.run_dir + "/last.safetensors"}), 0);
  for (const std::string& f : kReportFiles) EXPECT_TRUE(fs::is_regular_file(r.run_dir + "/" + f)) << f;
  std::ifstream jf2(r.run_dir + "/report.json");
  EXPECT_EQ(json::parse(jf2)["confusion"], j["confusion"]);  // the same weights, the same counts

  // kiln eval RUN weights=... out=DIR: into DIR.
  EXPECT_EQ(cli::cmd_eval({r.run_dir, "weights=" + r.run_dir, "out=" + runs + "/mine"}), 0);
  for (const std::string& f : kReportFiles) EXPECT_TRUE(fs::is_regular_file(runs + "/mine/" + f)) << f;

  // Weights outside any run folder: a new folder <runs>/<name>-eval.
  fs::copy_file(r.run_dir + "/last.safetensors", runs + "/w.safetensors");
  EXPECT_EQ(cli::cmd_eval({cfg_file, "weights=" + runs + "/w.safetensors"}), 0);
  for (const std::string& f : kReportFiles) EXPECT_TRUE(fs::is_regular_file(runs + "/tiny-eval/" + f)) << f;

  // A run folder without weights=: its own weights (its best checkpoint, else its last), report in it.
  for (const std::string& f : kReportFiles) fs::remove(r.run_dir + "/" + f);
  EXPECT_EQ(cli::cmd_eval({r.run_dir}), 0);
  for (const std::string& f : kReportFiles) EXPECT_TRUE(fs::is_regular_file(r.run_dir + "/" + f)) << f;

  EXPECT_EQ(cli::cmd_eval({"--help"}), 0);
  EXPECT_NE(error_of([&] { cli::cmd_eval({cfg_file}); }).find("needs weights=FILE"), std::string::npos);
}
