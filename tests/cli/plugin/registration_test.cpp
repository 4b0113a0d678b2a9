// A program's own components (core/registry.h), registered by tests/cli/plugin/plugin_components.cpp in a
// static library linked whole: each family takes them by name like kiln's own; the config schema lists
// them with the meanings given in code; kiln::train trains them through the whole engine (run folder,
// checkpoints, resume); their errors name the component and the config key; a name registered twice
// names both places; an unknown name lists the registered ones and says what to link.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/config.h"
#include "data/pipeline.h"
#include "layers/registry.h"
#include "models/registry.h"
#include "optim/registry.h"
#include "tests/data/data_test_util.h"  // TempDir
#include "tests/expect_error.h"
#include "tools/cli/config_schema.h"
#include "tools/engine/train_api.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::expect_error;
namespace fs = std::filesystem;

namespace {

// The plugin's model on the plugin's data, layer, transform, optimizer and schedule: all seven families.
json plugin_config(const std::string& runs) {
  json c = json::parse(R"({
    "name": "plug",
    "model": {"layers": [{"type": "scale", "factor": 0.5}, {"type": "flatten"},
                         {"type": "linear", "in_features": 192, "out_features": 4}]},
    "data": {"source": "stripes", "stripes_size": 64, "batch_size": 16, "workers": 1,
             "train_transforms": [{"type": "invert"}], "val_transforms": [{"type": "invert"}]},
    "optim": {"name": "plain_sgd", "lr": 0.5},
    "schedule": {"name": "halving"},
    "train": {"epochs": 3, "plots": false, "seed": 1}
  })");
  c["train"]["runs_dir"] = runs;
  return c;
}

bool contains(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

}  // namespace

TEST(Registration, EveryFamilyHoldsTheProgramsComponentsAfterKilnsOwn) {
  EXPECT_TRUE(contains(models::model_names(), "plugin_net"));
  EXPECT_EQ(models::model_names().front(), "lenet");  // kiln's own first
  EXPECT_TRUE(contains(layer_types(), "scale"));
  EXPECT_TRUE(contains(transform_types(), "invert"));
  EXPECT_TRUE(contains(optimizer_registry().names(), "plain_sgd"));
  EXPECT_TRUE(contains(schedule_registry().names(), "halving"));
  EXPECT_TRUE(contains(data_source_names(), "stripes"));
  // Where each was registered: the user's file and line, for "registered twice" and errors.
  EXPECT_NE(models::model_registry().entry("plugin_net")->place.find("plugin_components.cpp:"), std::string::npos);
}

TEST(Registration, TheProgramsModelIsBuiltAndReadLikeABuiltIn) {
  auto m = models::build_model({{"name", "plugin_net"}, {"width", 8}});
  EXPECT_EQ(m->type(), "plugin_net");
  EXPECT_EQ(m->num_parameters(), 192 * 8 + 8 + 8 * 4 + 4);
  EXPECT_EQ(models::read_model_options({{"name", "plugin_net"}}, "model")["width"], 16);  // built, written back
  // Its reader's errors name the key, as a built-in's do.
  expect_error([] { models::build_model({{"name", "plugin_net"}, {"widht", 8}}); }, {"model.widht", "did you mean model.width"});
  expect_error([] { models::build_model({{"name", "plugin_net"}, {"width", 0}}); }, {"model.width = 0", "1..4096"});
}

TEST(Registration, AComponentThatThrowsIsNamedWithItsKey) {
  EXPECT_HAS(error_of([] { models::build_model({{"name", "broken_net"}}); }),
             "config: model (name \"broken_net\", registered at ");
  EXPECT_HAS(error_of([] { models::build_model({{"name", "broken_net"}}); }), "): the broken net cannot be built");
}

TEST(Registration, ANameRegisteredTwiceNamesBothPlaces) {
  const std::string e = error_of([] { models::register_model("plugin_net", nullptr); });
  EXPECT_HAS(e, "a model \"plugin_net\" is registered twice: at ");
  EXPECT_HAS(e, "plugin_components.cpp:");
  EXPECT_HAS(e, "registration_test.cpp:");
  EXPECT_HAS(error_of([] { register_layer("conv2d", nullptr); }), "layers/registry.cpp:");  // kiln's own place
  EXPECT_HAS(error_of([] { register_transform("normalize", nullptr); }), "\"normalize\" is kiln's own");
  EXPECT_HAS(error_of([] { register_layer("", nullptr); }), "the name is empty");
}

TEST(Registration, AnUnknownNameListsTheRegisteredOnesAndWhatToLink) {
  const std::string far = error_of([] { models::build_model({{"name", "my_cnn_from_elsewhere"}}); });
  EXPECT_HAS(far, "accepted: lenet, alexnet");
  EXPECT_HAS(far, "plugin_net");
  EXPECT_HAS(far, "is not linked in: docs/library.md");
  // A near miss is a typo: the suggestion, not the linking hint.
  const std::string near = error_of([] { models::build_model({{"name", "plugin_nett"}}); });
  EXPECT_HAS(near, "did you mean \"plugin_net\"");
  EXPECT_EQ(near.find("linked"), std::string::npos) << near;
}

TEST(Registration, AComponentWhoseSampleIsRefusedIsAProblemNotACrash) {
  bool named = false;
  for (const std::string& p : cli::schema_problems()) named |= p.find("\"broken_net\" was refused") != std::string::npos;
  EXPECT_TRUE(named);
}

TEST(Registration, TheSchemaListsTheProgramsComponentsWithTheirMeanings) {
  const std::string help = cli::schema_text();
  EXPECT_HAS(help, "model.name = \"plugin_net\": a two-layer perceptron of the test plugin");
  EXPECT_HAS(help, "model.width  integer, default 16; accepted: 1..4096\n      hidden units of the plugin's perceptron");
  EXPECT_HAS(help, "model.layers[].factor  number, default 1");
  EXPECT_HAS(help, "the factor the input is multiplied by");
  EXPECT_HAS(help, "data.stripes_size  integer, default 64; accepted: 4..1048576\n      images per split of the stripes source");
  EXPECT_HAS(help, "optim.lr");
  EXPECT_HAS(help, "the learning rate of plain SGD");
  // The selectors' accepted values hold them too.
  EXPECT_HAS(help, "resnet_cifar, plugin_net, broken_net");
  EXPECT_HAS(help, "invert");
  EXPECT_HAS(help, "halving");
}

TEST(Registration, KilnTrainTrainsTheProgramsComponentsAndResumesThem) {
  kiln::testing::TempDir dir;
  const json config = plugin_config(dir.str());
  const TrainResult r = kiln::train(config, {"train.stop_after=2"}, /*quiet=*/true);
  ASSERT_TRUE(fs::exists(r.run_dir + "/config.json"));
  EXPECT_EQ(r.epochs, 3);
  // The run's config.json names the plugin's components, and resuming rebuilds them from it.
  std::ifstream f(r.run_dir + "/config.json");
  const json as_run = json::parse(f);
  EXPECT_EQ(as_run["data"]["source"], "stripes");
  EXPECT_EQ(as_run["data"]["stripes_size"], 64);
  EXPECT_EQ(as_run["model"]["layers"][0], (json{{"type", "scale"}, {"factor", 0.5}}));
  EXPECT_EQ(as_run["optim"]["name"], "plain_sgd");
  const TrainResult resumed = kiln::train(json(r.run_dir), {}, true);
  EXPECT_EQ(resumed.run_dir, r.run_dir);
  EXPECT_GT(resumed.val_top1, 0.9);  // the lit row is easy: the halving lr still learns it in 3 epochs
  // A bad override is refused before anything trains, naming the key.
  EXPECT_HAS(error_of([&] { kiln::train(config, {"data.stripes_size=2"}, true); }), "data.stripes_size = 2");
}
