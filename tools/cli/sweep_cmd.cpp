// `kiln sweep CONFIG|SWEEP_FILE|SWEEP_DIR [...]` and `kiln sweep show SWEEP_DIR`: the plan read, every
// variant checked as kiln train would check it (resolve_config, check_config, the model built to count its
// parameters) before anything runs, written to runs/<sweep>/sweep.json, then run (tools/sweep/runner.h);
// the table (tools/sweep/summary.h). docs/sweeps.md. Tests: tests/sweep/sweep_process_test.cpp.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/check.h"
#include "tools/cli/commands.h"
#include "tools/cli/config_schema.h"
#include "tools/cli/kv_args.h"
#include "tools/deploy/config.h"
#include "tools/deploy/model_io.h"
#include "tools/engine/metrics.h"  // write_file_atomically
#include "tools/engine/trainer.h"  // check_config
#include "tools/sweep/plan.h"
#include "tools/sweep/runner.h"
#include "tools/sweep/summary.h"

namespace fs = std::filesystem;

namespace kiln::cli {

namespace {

const char* kUsage =
    "usage: kiln sweep CONFIG [key=v1,v2,... ...] [seeds=0,1,2] [name=NAME] [devices=0,1|parallel=N|auto] [key=value ...]\n"
    "       kiln sweep SWEEP_FILE [devices=0,1|parallel=N]\n"
    "       kiln sweep runs/<sweep> [retry=failed] [devices=0,1|parallel=N]   continues a sweep\n"
    "       kiln sweep show runs/<sweep>                                      rewrites and prints its table\n"
    "  Trains every variant with every seed, each run an ordinary run folder runs/<sweep>/<variant>-s<seed>/\n"
    "  (a child kiln train), and keeps runs/<sweep>/summary.md, .csv, .json, top1.png and curves.png up to date.\n"
    "  A value with commas is a grid axis (every combination is a variant; device=0,1 stays one device list);\n"
    "  seeds= sets train.seed (default 0); name= the sweep folder's name (default <config name>-sweep). Every\n"
    "  variant is checked before the first run starts. Finished runs are kept when a sweep continues, stopped\n"
    "  ones resume, failed ones are recorded and run again only with retry=failed. Placement: devices=0,1,2,3\n"
    "  one run per GPU at a time; parallel=N N runs at a time with the cores split between them (default auto: 2\n"
    "  when the runs train on the CPU, which measured faster on 2 cores than one run on both; else 1).\n"
    "  Ctrl-C stops the runs in flight (they save) and prints how to continue.\n"
    "  The sweep file format and the table: docs/sweeps.md.";

// What kiln train would refuse, checked without training: the config resolved (every section read, the
// model built), the trainer's check, and the model's parameter count (its initial weights, on the CPU).
int64_t check_run_config(const json& config) {
  const json resolved = resolve_config(config);
  check_config(config);
  return initial_model(resolved)->num_parameters();
}

sweep::Placement read_placement(const KeyValueArgs& a, sweep::Placement p) {
  if (a.given("parallel")) p.parallel = a.str("parallel") == "auto" ? 0 : a.integer("parallel", 1);
  if (a.given("devices")) {
    p.devices.clear();
    for (const std::string& d : split_commas(a.str("devices"))) p.devices.push_back(d);
  }
  KILN_CHECK(p.devices.empty() || p.parallel <= 1, "kiln sweep: devices= and parallel= do not go together: with devices "
             "each device trains one run at a time");
  return p;
}

std::string kiln_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  KILN_CHECK(!ec, "kiln sweep: cannot find this kiln executable (/proc/self/exe): ", ec.message());
  return self.string();
}

sweep::SweepPlan load_sweep_dir(const std::string& dir) {
  const fs::path file = fs::path(dir) / "sweep.json";
  KILN_CHECK(fs::exists(file), "kiln sweep: ", dir, " is not a sweep folder (no sweep.json); give a config, a sweep file or "
             "a folder that kiln sweep made (runs/<sweep>)");
  sweep::SweepPlan plan = sweep::plan_from_json(load_config_file(file.string()), file.string());
  plan.dir = dir;
  return plan;
}

// A new plan's folder: made, or continued when it holds the same plan (or one this plan only adds to).
void settle_folder(const sweep::SweepPlan& plan) {
  const fs::path file = fs::path(plan.dir) / "sweep.json";
  if (fs::exists(file)) {
    const sweep::SweepPlan before = sweep::plan_from_json(load_config_file(file.string()), file.string());
    const std::vector<std::string> changes = sweep::plan_changes(before, plan);
    KILN_CHECK(changes.empty(), "kiln sweep: ", plan.dir, " holds another plan; what changed: ", join(changes, "; "),
               ". A sweep continues with the same plan or one that only adds variants or seeds: give another name=, "
               "or continue it as it is with kiln sweep ", plan.dir);
    std::cout << "[sweep " << plan.name << "] continuing " << plan.dir << " (the plan "
              << (plan_to_json(before) == plan_to_json(plan) ? "is unchanged" : "adds variants or seeds") << ")\n";
  } else if (fs::exists(plan.dir)) {
    KILN_CHECK(fs::is_directory(plan.dir) && fs::is_empty(plan.dir), "kiln sweep: ", plan.dir,
               " exists and is not a sweep folder (no sweep.json); give the sweep another name=");
  }
  fs::create_directories(plan.dir);
  write_file_atomically(file.string(), sweep::plan_to_json(plan).dump(2) + "\n");
}

int sweep_show(const Args& args) {
  KILN_CHECK(args.size() == 1, "kiln sweep show: give one sweep folder (runs/<sweep>)");
  const sweep::SweepPlan plan = load_sweep_dir(args[0]);
  const sweep::Summary s = sweep::summarize(plan);
  sweep::write_summary(s, plan.dir);
  std::cout << sweep::summary_markdown(s);
  return 0;
}

// retry=failed (runs the failed runs again); nothing else is a value of retry.
bool read_retry(const KeyValueArgs& a) {
  KILN_CHECK(a.str("retry").empty() || a.str("retry") == "failed", "kiln sweep: retry=", a.str("retry"),
             " is not accepted; accepted: retry=failed");
  return a.str("retry") == "failed";
}

}  // namespace

int cmd_sweep(const Args& args) {
  if (wants_help(args, kUsage)) return 0;
  KILN_CHECK(!args.empty() && args[0].find('=') == std::string::npos, kUsage);
  if (args[0] == "show") return sweep_show(Args(args.begin() + 1, args.end()));
  const Args rest(args.begin() + 1, args.end());
  sweep::RunnerOptions opt;
  opt.kiln = kiln_executable();
  sweep::SweepPlan plan;
  if (fs::is_directory(args[0])) {  // continue a sweep
    plan = load_sweep_dir(args[0]);
    const KeyValueArgs a("kiln sweep " + args[0], rest, {{"retry", ""}, {"parallel", "auto"}, {"devices", ""}});
    opt.retry_failed = read_retry(a);
    opt.placement = read_placement(a, {});
  } else {
    KILN_CHECK(fs::is_regular_file(args[0]), "kiln sweep: ", args[0], " is not a file or folder; give a config, a sweep "
               "file or a sweep folder");
    if (sweep::is_sweep_file(args[0])) {
      const KeyValueArgs a("kiln sweep " + args[0], rest, {{"retry", ""}, {"parallel", "auto"}, {"devices", ""}});
      plan = sweep::plan_from_file(args[0], &opt.placement);
      opt.placement = read_placement(a, opt.placement);
      opt.retry_failed = read_retry(a);
    } else {
      plan = sweep::plan_from_command_line(args[0], rest, &opt.placement);
      opt.placement = read_placement(KeyValueArgs("kiln sweep", {}, {{"parallel", "auto"}, {"devices", ""}}), opt.placement);
    }
    sweep::validate_plan(plan, check_run_config);
    settle_folder(plan);
    std::cout << "[sweep " << plan.name << "] plan: " << plan.variants.size() << " variant(s) x " << plan.seeds.size()
              << " seed(s) = " << plan.variants.size() * plan.seeds.size() << " runs, every variant checked; written to "
              << plan.dir << "/sweep.json" << std::endl;
  }
  return sweep::run_sweep(plan, opt, std::cout);
}

}  // namespace kiln::cli
