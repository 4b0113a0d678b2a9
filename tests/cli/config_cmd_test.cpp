// `kiln config show|keys` and `kiln train --help` as a user runs them (the kiln binary): show fills every
// default and applies overrides without touching data files; a bad key or file is one clear error naming
// it; --help lists every key with its default and the command-line forms.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../kiln_process.h"

namespace fs = std::filesystem;

namespace {

using kiln::testing::KilnRun;

std::string read_text(const fs::path& p) { return kiln::testing::file_tail(p.string(), std::string::npos); }

fs::path work_dir() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("kiln_config_cmd_" + std::to_string(getpid()));
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }();
  return d;
}

// Runs the kiln binary with `args` in work_dir().
KilnRun run_kiln(const std::string& args) { return kiln::testing::run_kiln_in(work_dir(), args); }

std::string write_config(const std::string& name, const std::string& text) {
  const fs::path p = work_dir() / name;
  std::ofstream(p) << text;
  return p.string();
}

}  // namespace

TEST(ConfigCommand, ShowFillsEveryDefaultAndAppliesOverrides) {
  const std::string cfg = write_config(
      "mini.json", R"({"model": {"name": "lenet"}, "data": {"source": "synthetic"}, "optim": {"name": "sgd"}})");
  KilnRun r = run_kiln("config show '" + cfg + "' epochs=3 optim.momentum=0.5 train.keep_last=2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["name"], "run");
  EXPECT_EQ(j["train"]["epochs"], 3);                 // short form
  EXPECT_EQ(j["train"]["keep_last"], 2);              // dotted path
  EXPECT_EQ(j["optim"]["momentum"], 0.5);
  EXPECT_EQ(j["train"]["max_steps_per_epoch"], 0);    // defaults filled in
  EXPECT_EQ(j["train"]["precision"], "fp32");
  EXPECT_EQ(j["optim"]["name"], "sgd");
  EXPECT_EQ(j["optim"]["lr"], 0.1);
  EXPECT_EQ(j["schedule"]["name"], "constant");
  EXPECT_EQ(j["data"]["workers"], 2);
  EXPECT_EQ(j["data"]["synthetic"]["size"], 1024);
  EXPECT_EQ(j["model"]["input_size"], 28);
  EXPECT_EQ(j["model"]["num_classes"], 10);
  EXPECT_FALSE(fs::exists(work_dir() / "runs"));  // nothing trained, no run folder
}

TEST(ConfigCommand, ShowOpensNoDataFile) {
  // The repository's default config, its dataset folder pointed nowhere: resolved all the same.
  KilnRun r = run_kiln("config show '" + std::string(KILN_SOURCE_DIR) + "/configs/fashion_mnist_cnn.json' "
                       "data.root=/nonexistent/kiln batch=-1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["data"]["root"], "/nonexistent/kiln");
  EXPECT_EQ(j["data"]["batch_size"], -1);  // AutoBatch decides when a run starts
}

TEST(ConfigCommand, BadKeyOrFileIsOneClearError) {
  const std::string cfg = write_config("mini2.json", R"({"model": {"name": "lenet"}, "data": {"source": "synthetic"}})");
  KilnRun r = run_kiln("config show '" + cfg + "' train.max_step_per_epoch=3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown key train.max_step_per_epoch (did you mean train.max_steps_per_epoch?)"),
            std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");

  const std::string bad = write_config("bad.json", R"({"model": {"name": "lenet"}, "data": {"source": "synthetic"},
                                                       "optim": {"name": "sgd", "momentun": 0.9}})");
  r = run_kiln("config show '" + bad + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown key optim.momentun (did you mean optim.momentum?)"), std::string::npos) << r.err;

  r = run_kiln("config show nowhere.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nowhere.json"), std::string::npos) << r.err;

  r = run_kiln("config show");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("usage: kiln config show"), std::string::npos) << r.err;

  r = run_kiln("config keys --markdwn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'--markdwn' is not accepted; accepted: --markdown"), std::string::npos) << r.err;
}

TEST(ConfigCommand, TrainHelpListsEveryKeyWithItsDefault) {
  for (const char* flag : {"--help", "-h"}) {
    KilnRun r = run_kiln(std::string("train ") + flag);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_NE(r.out.find("usage: kiln train CONFIG|RUN [key=value ...]"), std::string::npos);
    EXPECT_NE(r.out.find("  train.max_steps_per_epoch  integer, default 0; accepted: >= 0\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("stop each epoch after this many steps"), std::string::npos);
    EXPECT_NE(r.out.find("optim.name = \"adamw\":"), std::string::npos);
    EXPECT_NE(r.out.find("data.*_transforms[].type = \"random_crop\":"), std::string::npos);
    for (const char* form : {"key=value", "resume=RUN|CHECKPOINT", "device=cpu|0|0,1", "batch=N", "epochs=N"})
      EXPECT_NE(r.out.find(form), std::string::npos) << form;
  }
  // kiln config keys lists the same keys.
  KilnRun keys = run_kiln("config keys");
  ASSERT_EQ(keys.exit_code, 0);
  EXPECT_NE(keys.out.find("  train.max_steps_per_epoch  integer, default 0; accepted: >= 0\n"), std::string::npos);
}

TEST(ConfigCommand, KeysMarkdownRewritesTheDocTable) {
  const fs::path doc = work_dir() / "doc.md";
  std::ofstream(doc) << "# t\n<!-- config keys: generated by `build/tools/kiln config keys --markdown doc=docs/training.md`; "
                        "do not edit -->\nold\n<!-- end of config keys -->\ntail\n";
  KilnRun r = run_kiln("config keys --markdown doc='" + doc.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string text = read_text(doc);
  EXPECT_EQ(text.find("\nold\n"), std::string::npos);
  EXPECT_NE(text.find("| `train.max_steps_per_epoch` | integer | `0` |"), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 5), "tail\n");
  EXPECT_EQ(run_kiln("config keys --markdown").out.size() + 0 > 1000, true);
  r = run_kiln("config keys --markdown doc=" + (work_dir() / "none.md").string());
  EXPECT_EQ(r.exit_code, 1);
}
