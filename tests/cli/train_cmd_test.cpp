// `kiln train` (tools/cli/train_cmd.cpp): a run folder resumes that run in place, a finished run is
// refused naming epochs=N, epochs=N continues it, resume=RUN needs no config, and a folder that is not
// a run is named; an argument with dashes or a misspelt short form ends it with exit status 1 and the
// suggestion, before anything is made.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/data_parallel_config.h"
#include "tests/expect_error.h"
#include "tests/data/data_test_util.h"  // TempDir
#include "tests/kiln_process.h"
#include "tools/cli/commands.h"

using namespace kiln;
using kiln::testing::error_of;
namespace fs = std::filesystem;

namespace {

int lines_in(const std::string& path) {
  std::ifstream f(path);
  int n = 0;
  for (std::string l; std::getline(f, l);) n += !l.empty();
  return n;
}

}  // namespace

TEST(TrainCommand, ARunFolderResumesThatRunInPlace) {
  kiln::testing::TempDir dir;  // removed with what the runs wrote
  const std::string runs = dir.str();
  const std::string cfg = runs + "/tiny.json";
  std::ofstream(cfg) << kiln::testing::tiny_report_config(runs).dump();  // one epoch, run "tiny"
  ::testing::internal::CaptureStdout();
  const int first = cli::cmd_train({cfg, "train.plots=false"});
  ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(first, 0);
  const std::string run = runs + "/tiny";
  ASSERT_TRUE(fs::is_regular_file(run + "/config.json"));
  const int rows = lines_in(run + "/metrics.csv");  // a header and one row per epoch

  // Finished: refused, naming what continues it; nothing new is written.
  EXPECT_HAS(error_of([&] { cli::cmd_train({run}); }), "ask for more epochs (epochs=N) to continue");
  EXPECT_FALSE(fs::exists(runs + "/tiny-2"));

  // epochs=2: the same run goes on in its own folder, from its checkpoint.
  ::testing::internal::CaptureStdout();
  const int second = cli::cmd_train({run, "epochs=2"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(second, 0);
  EXPECT_HAS(out, "resumed " + run);
  EXPECT_FALSE(fs::exists(runs + "/tiny-2")) << "a run folder must not start a new run";
  EXPECT_EQ(lines_in(run + "/metrics.csv"), rows + 1);
  std::ifstream as_run(run + "/config.json");
  EXPECT_EQ(json::parse(as_run)["train"]["epochs"], 2);

  // resume=RUN without a config: the run's own config, the run's own folder.
  ::testing::internal::CaptureStdout();
  const int third = cli::cmd_train({"resume=" + run, "epochs=3"});
  ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(third, 0);
  EXPECT_FALSE(fs::exists(runs + "/tiny-2"));
  EXPECT_EQ(lines_in(run + "/metrics.csv"), rows + 2);

  // A folder that is not a run (no config.json) is named, not trained from.
  EXPECT_HAS(error_of([&] { cli::cmd_train({runs}); }), "is a folder without config.json, not a run folder");
}

TEST(TrainCommand, DashesAndMisspeltShortFormsExitWithTheSuggestion) {
  kiln::testing::TempDir dir;
  const std::string cfg = dir.str() + "/tiny.json";
  std::ofstream(cfg) << kiln::testing::tiny_report_config(dir.str()).dump();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--epochs=1", "kiln: error: argument '--epochs=1': did you mean epochs=1? kiln takes key=value without dashes"},
      {"--lr=0.1", "kiln: error: argument '--lr=0.1': did you mean lr=0.1? kiln takes key=value without dashes"},
      {"--train.epochs=3", "did you mean train.epochs=3? kiln takes key=value without dashes"},
      {"epohcs=1", "kiln: error: argument 'epohcs=1': unknown key epohcs (did you mean epochs (train.epochs)?)"},
  };
  for (const auto& [arg, message] : cases) {
    const fs::path cwd = fs::path(dir.str()) / "cwd";
    fs::create_directories(cwd);
    const kiln::testing::KilnRun r = kiln::testing::run_kiln_in(cwd, "train '" + cfg + "' " + arg);
    EXPECT_EQ(r.exit_code, 1) << arg << ": " << r.err;
    EXPECT_HAS(r.err, message);
    EXPECT_FALSE(fs::exists(dir.str() + "/tiny")) << arg << ": no run may start";
  }
}
