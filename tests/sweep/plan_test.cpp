// The sweep's plan (tools/sweep/plan.h) and placement (tools/sweep/runner.h): a grid's variants and their
// labels, run names and order, the run's config, the checks before anything runs (duplicates, empty grid,
// a variant its validator refuses), the comparison with the plan already in a sweep folder, and which
// devices a run takes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tools/sweep/plan.h"
#include "tools/sweep/runner.h"

using namespace kiln;
using namespace kiln::sweep;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kiln_sweep_plan_" + std::to_string(getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string base_config(const fs::path& dir) {
  const fs::path f = dir / "base.json";
  std::ofstream(f) << R"({"name": "tiny", "model": {"name": "lenet"}, "optim": {"name": "sgd", "lr": 0.1},
                          "train": {"epochs": 2, "runs_dir": ")" << (dir / "runs").string() << R"("}})";
  return f.string();
}

// Removes this process's folders when every test passed.
class Cleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!::testing::UnitTest::GetInstance()->Failed())
      fs::remove_all(fs::temp_directory_path() / ("kiln_sweep_plan_" + std::to_string(getpid())));
  }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new Cleanup);

std::string expect_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace

TEST(SweepPlan, CommandLineGridIsEveryCombinationSeedBySeed) {
  const fs::path d = temp_dir("grid");
  Placement p;
  SweepPlan plan = plan_from_command_line(base_config(d), {"model.depth=20,32", "lr=0.1,0.05", "seeds=0,1", "epochs=3",
                                                           "device=0,1", "parallel=2"}, &p);
  ASSERT_EQ(plan.variants.size(), 4u);
  EXPECT_EQ(plan.variants[0].label, "depth20_lr0.1");
  EXPECT_EQ(plan.variants[3].label, "depth32_lr0.05");
  EXPECT_EQ(plan.variants[3].overrides, (std::vector<std::string>{"model.depth=32", "lr=0.05"}));
  EXPECT_EQ(plan.seeds, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(plan.name, "tiny-sweep");
  EXPECT_EQ(plan.dir, (d / "runs" / "tiny-sweep").string());
  EXPECT_EQ(p.parallel, 2);
  // epochs=3 and device=0,1 (one device list, not an axis) are the base's.
  EXPECT_EQ(plan.base["train"]["epochs"], 3);
  EXPECT_EQ(plan.base["train"]["device"], "0,1");
  const std::vector<PlannedRun> runs = planned_runs(plan);
  ASSERT_EQ(runs.size(), 8u);
  EXPECT_EQ(runs[0].name, "depth20_lr0.1-s0");
  EXPECT_EQ(runs[3].name, "depth32_lr0.05-s0");
  EXPECT_EQ(runs[4].name, "depth20_lr0.1-s1");  // every variant's first seed before the second
  const json c = run_config(plan, runs[5]);
  EXPECT_EQ(c["name"], "depth20_lr0.05-s1");
  EXPECT_EQ(c["train"]["seed"], 1);
  EXPECT_EQ(c["train"]["runs_dir"], plan.dir);
  EXPECT_EQ(c["model"]["depth"], 20);
  EXPECT_EQ(c["optim"]["lr"], 0.05);
}

TEST(SweepPlan, SweepFileVariantsGridAndExpectedFigures) {
  const fs::path d = temp_dir("file");
  base_config(d);
  std::ofstream(d / "s.json") << R"({"name": "abl", "base": "base.json", "set": {"train.epochs": 4},
    "grid": {"optim.lr": [0.1, 0.2]},
    "variants": [{"label": "wide", "set": {"model.width": 2}, "expected": {"top1": 93.5, "source": "paper, Table 2"}}],
    "expected": {"lr0.1": {"top1": 91, "source": "paper, Table 1"}},
    "seeds": [3, 4], "devices": "0,1"})";
  Placement p;
  const SweepPlan plan = plan_from_file((d / "s.json").string(), &p);
  ASSERT_EQ(plan.variants.size(), 3u);
  EXPECT_EQ(plan.variants[0].label, "lr0.1");
  EXPECT_TRUE(plan.variants[0].has_expected);
  EXPECT_EQ(plan.variants[0].expected.top1, 91);
  EXPECT_EQ(plan.variants[2].label, "wide");
  EXPECT_EQ(plan.variants[2].expected.source, "paper, Table 2");
  EXPECT_EQ(plan.base["train"]["epochs"], 4);
  EXPECT_EQ(p.devices, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(plan.seeds, (std::vector<int64_t>{3, 4}));
  // Written and read back: the same plan.
  EXPECT_EQ(plan_to_json(plan_from_json(plan_to_json(plan), "sweep.json")), plan_to_json(plan));
}

// A recipe's replicates: a sweep file of a base, settings and seeds, without grid or variants, is a
// sweep file (not read as a training config) of one variant over the seeds.
TEST(SweepPlan, SweepFileWithoutGridOrVariantsIsTheBaseOverTheSeeds) {
  const fs::path d = temp_dir("seeds_only");
  base_config(d);
  std::ofstream(d / "r.json") << R"({"base": "base.json", "set": {"train.epochs": 3}, "seeds": [0, 1, 2]})";
  EXPECT_TRUE(is_sweep_file((d / "r.json").string()));
  EXPECT_FALSE(is_sweep_file((d / "base.json").string()));
  const SweepPlan plan = plan_from_file((d / "r.json").string(), nullptr);
  ASSERT_EQ(plan.variants.size(), 1u);
  EXPECT_EQ(plan.variants[0].label, "base");
  EXPECT_TRUE(plan.variants[0].overrides.empty());
  EXPECT_EQ(plan.base["train"]["epochs"], 3);
  EXPECT_EQ(plan.seeds, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(plan.name, "r");
}

TEST(SweepPlan, EmptyGridDuplicatesAndBadValuesAreRefusedNamingThem) {
  const fs::path d = temp_dir("bad");
  base_config(d);
  auto file = [&](const std::string& text) {
    std::ofstream(d / "s.json") << text;
    return (d / "s.json").string();
  };
  EXPECT_NE(expect_error([&] { plan_from_file(file(R"({"base": "base.json", "grid": {}})"), nullptr); }).find("grid is empty"),
            std::string::npos);
  EXPECT_NE(expect_error([&] { plan_from_file(file(R"({"base": "base.json", "grid": {"optim.lr": []}})"), nullptr); })
                .find("grid.optim.lr must be a non-empty list"),
            std::string::npos);
  EXPECT_NE(expect_error([&] { plan_from_file(file(R"({"base": "base.json", "variants": [{"label": "a"}], "grdi": 1})"), nullptr); })
                .find("grdi"),
            std::string::npos);
  EXPECT_NE(expect_error([&] { plan_from_command_line(base_config(d), {"lr=0.1,"}, nullptr); }).find("none of them empty"),
            std::string::npos);
  EXPECT_NE(expect_error([&] { plan_from_command_line(base_config(d), {"seeds=0,x"}, nullptr); }).find("seed 'x'"),
            std::string::npos);
  auto ok = [](const json&) { return int64_t{7}; };
  SweepPlan dup = plan_from_file(file(R"({"base": "base.json", "variants": [{"label": "a", "set": {"lr": 0.1}},
      {"label": "b", "set": {"optim.lr": 0.1}}]})"), nullptr);
  EXPECT_NE(expect_error([&] { validate_plan(dup, ok); }).find("variants 'a' and 'b' are the same (optim.lr=0.1)"),
            std::string::npos);
  SweepPlan twice = plan_from_file(file(R"({"base": "base.json", "variants": [{"label": "a", "set": {"lr": 0.1}},
      {"label": "a", "set": {"lr": 0.2}}]})"), nullptr);
  EXPECT_NE(expect_error([&] { validate_plan(twice, ok); }).find("two variants are labelled 'a'"), std::string::npos);
  SweepPlan seeds = plan_from_command_line(base_config(d), {"seeds=1,1"}, nullptr);
  EXPECT_NE(expect_error([&] { validate_plan(seeds, ok); }).find("seed 1 is listed twice"), std::string::npos);
  // The validator's error, named by the variant; every variant is checked, the counts are kept.
  SweepPlan plan = plan_from_command_line(base_config(d), {"model.depth=20,21"}, nullptr);
  const std::string e = expect_error([&] {
    validate_plan(plan, [](const json& c) -> int64_t {
      KILN_CHECK(c["model"]["depth"] != 21, "model.depth = 21 is not accepted; accepted: 6n+2");
      return 5;
    });
  });
  EXPECT_NE(e.find("variant 'depth21' (model.depth=21): model.depth = 21 is not accepted"), std::string::npos) << e;
  EXPECT_NE(e.find("nothing has run"), std::string::npos) << e;
  SweepPlan good = plan_from_command_line(base_config(d), {"model.depth=20,32"}, nullptr);
  validate_plan(good, ok);
  EXPECT_EQ(good.variants[1].params, 7);
}

TEST(SweepPlan, ContinuingWithAChangedPlanNamesWhatChangedButAddingIsAccepted) {
  const fs::path d = temp_dir("changes");
  const std::string cfg = base_config(d);
  const SweepPlan before = plan_from_command_line(cfg, {"model.depth=20,32", "seeds=0,1", "name=x"}, nullptr);
  EXPECT_TRUE(plan_changes(before, before).empty());
  const SweepPlan more = plan_from_command_line(cfg, {"model.depth=20,32,56", "seeds=0,1,2", "name=x"}, nullptr);
  EXPECT_TRUE(plan_changes(before, more).empty()) << "adding variants and seeds continues the sweep";
  const SweepPlan changed = plan_from_command_line(cfg, {"model.depth=20,56", "seeds=1", "lr=0.05", "name=x"}, nullptr);
  const std::vector<std::string> c = plan_changes(before, changed);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0], "base config: optim.lr: 0.1 -> 0.05");
  EXPECT_EQ(c[1], "variant 'depth32' is missing");
  EXPECT_EQ(c[2], "seed 0 is missing");
}

// The ETA printed as runs end: runs still in flight count only what is left of a run, so the last
// runs of a sweep of three at a time, all nearly done, read about a minute, not another whole run
// (it read "sweep eta 1:29:46" there).
TEST(SweepPlacement, TheEtaCountsWhatIsLeftOfTheRunsInFlight) {
  EXPECT_DOUBLE_EQ(sweep_eta_seconds(5400, {5350, 5340}, 0, 3), 60);        // two nearly done, nothing waiting
  EXPECT_DOUBLE_EQ(sweep_eta_seconds(100, {}, 4, 2), 200);                   // 4 runs, 2 at a time
  EXPECT_DOUBLE_EQ(sweep_eta_seconds(100, {}, 3, 2), 200);                   // the odd one runs after
  EXPECT_DOUBLE_EQ(sweep_eta_seconds(100, {30}, 1, 2), 100);                 // the free slot takes the waiting run
  EXPECT_DOUBLE_EQ(sweep_eta_seconds(100, {30}, 2, 2), 170);                 // then the next free slot: 70 + 100
  EXPECT_DOUBLE_EQ(sweep_eta_seconds(100, {250}, 0, 1), 0);                  // past the mean: no negative time
  EXPECT_DOUBLE_EQ(sweep_eta_seconds(100, {}, 2, 1), 200);                   // one at a time
}

TEST(SweepPlacement, ARunTakesOneFreeDeviceOrAllItsVariantAsksFor) {
  std::vector<std::string> free = {"0", "1", "2"}, taken;
  EXPECT_TRUE(take_devices({}, free, &taken));
  EXPECT_EQ(taken, (std::vector<std::string>{"0"}));
  EXPECT_FALSE(take_devices({"0", "1"}, free, &taken)) << "0 is busy";
  EXPECT_EQ(free.size(), 2u) << "nothing taken when not all are free";
  EXPECT_TRUE(take_devices({"2", "1"}, free, &taken));
  EXPECT_TRUE(free.empty());
  EXPECT_FALSE(take_devices({}, free, &taken));
  Variant v;
  v.overrides = {"lr=0.1", "device=0,1"};
  EXPECT_EQ(variant_devices(v), (std::vector<std::string>{"0", "1"}));
  v.overrides = {"train.device=[2, 3]"};
  EXPECT_EQ(variant_devices(v), (std::vector<std::string>{"2", "3"}));
  v.overrides = {"lr=0.1"};
  EXPECT_TRUE(variant_devices(v).empty());
}
