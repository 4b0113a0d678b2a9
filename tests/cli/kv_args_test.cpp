// key=value command-line arguments (tools/cli/kv_args.h): values and defaults, whole numbers with a
// floor, unknown keys listed, config overrides kept in order; and the commands that read them. The
// mistakes of users of other tools (tools/deploy/config.h): dashes ("--epochs=1") and a misspelt short
// form ("epohcs=1"), each refused naming the argument and what was meant.
#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "tools/cli/commands.h"
#include "tools/cli/config_schema.h"
#include "tools/cli/kv_args.h"
#include "tools/deploy/config.h"

using namespace kiln;
using kiln::cli::KeyValueArgs;

namespace {
using kiln::testing::error_text_of;
}  // namespace

TEST(KeyValueArgs, ValuesDefaultsAndNumbers) {
  const KeyValueArgs kv("bench x", {"batch=64", "model=a=b", "out=", "batch=32"},
                        {{"batch", "128"}, {"model", "lenet"}, {"out", "o"}, {"steps", "5"}});
  EXPECT_EQ(kv.integer("batch", 1), 32);  // the last one wins
  EXPECT_EQ(kv.str("model"), "a=b");     // the value may hold '='
  EXPECT_EQ(kv.str("out"), "");          // and may be empty
  EXPECT_TRUE(kv.given("out"));
  EXPECT_FALSE(kv.given("steps"));
  EXPECT_EQ(kv.integer("steps", 1), 5);
  EXPECT_EQ(kv.accepted(), "batch, model, out, steps");
  EXPECT_TRUE(kv.overrides().empty());
}

TEST(KeyValueArgs, ErrorsNameTheCommandAndTheArgument) {
  EXPECT_EQ(error_text_of([] { KeyValueArgs("bench x", {"modle=a"}, {{"model", ""}, {"batch", "1"}}); }),
            "bench x: unknown argument 'modle=a' (did you mean model=?); accepted: batch, model (as key=value)");
  EXPECT_EQ(error_text_of([] { KeyValueArgs("bench x", {"model"}, {{"model", ""}}); }),
            "bench x: unknown argument 'model' (did you mean model=?); accepted: model (as key=value)");
  EXPECT_EQ(error_text_of([] { KeyValueArgs("bench x", {"zzz=1"}, {{"model", ""}}); }),
            "bench x: unknown argument 'zzz=1'; accepted: model (as key=value)");  // nothing close: no guess
  for (const char* bad : {"batch=0", "batch=1.5", "batch=", "batch=ten", "batch=99999999999999999999", "batch= 3"}) {
    const KeyValueArgs kv("bench x", {bad}, {{"batch", "1"}});
    EXPECT_EQ(error_text_of([&] { kv.integer("batch", 1); }),
              std::string("bench x: '") + bad + "': batch takes a whole number >= 1")
        << bad;
  }
  const KeyValueArgs zero("bench x", {"warmup=0"}, {{"warmup", "2"}});
  EXPECT_EQ(zero.integer("warmup", 0), 0);
}

TEST(KeyValueArgs, OverridesAreKeptInOrder) {
  const KeyValueArgs kv("kiln data", {"train.epochs=3", "out=d", "data.batch_size=8"}, {{"out", ""}},
                        KeyValueArgs::Mode::overrides);
  EXPECT_EQ(kv.str("out"), "d");
  EXPECT_EQ(kv.overrides(), (std::vector<std::string>{"train.epochs=3", "data.batch_size=8"}));
  EXPECT_NE(error_text_of([] { KeyValueArgs("kiln data", {"epochs"}, {{"out", ""}}, KeyValueArgs::Mode::overrides); })
                .find("kiln data: 'epochs' is not key=value; accepted keys: out, or config overrides"),
            std::string::npos);
  EXPECT_NE(error_text_of([] { KeyValueArgs("kiln data", {"=3"}, {{"out", ""}}, KeyValueArgs::Mode::overrides); })
                .find("'=3' is not key=value"),
            std::string::npos);
}

TEST(KeyValueArgs, TheCommandsReadThem) {
  EXPECT_NE(error_text_of([] { cli::bench_checkpoint({"sise=8"}); })
                .find("bench checkpoint: unknown argument 'sise=8' (did you mean size=?); accepted: batch, classes, device, model"),
            std::string::npos);
  EXPECT_NE(error_text_of([] { cli::bench_checkpoint({"size=4"}); }).find("bench checkpoint: 'size=4': size takes a whole number >= 8"),
            std::string::npos);
}

TEST(KeyValueArgs, DashesAreRefusedNamingTheArgumentWithoutThem) {
  EXPECT_EQ(error_text_of([] { KeyValueArgs("bench x", {"--batch=8"}, {{"batch", "1"}}); }),
            "bench x: argument '--batch=8': did you mean batch=8? kiln takes key=value without dashes");
  EXPECT_EQ(error_text_of([] { KeyValueArgs("kiln data", {"--epochs=1"}, {{"out", ""}}, KeyValueArgs::Mode::overrides); }),
            "kiln data: argument '--epochs=1': did you mean epochs=1? kiln takes key=value without dashes");
  EXPECT_EQ(error_text_of([] { KeyValueArgs("kiln data", {"--out"}, {{"out", ""}}, KeyValueArgs::Mode::overrides); }),
            "kiln data: argument '--out': kiln takes key=value without dashes: out=VALUE (e.g. epochs=3)");
}

// apply_overrides, which every command that takes config overrides calls (kiln train, eval, config show,
// data, export, predict): dashes and misspelt short forms, before anything is applied.
TEST(Overrides, DashesAndMisspeltShortFormsNameTheArgumentAndTheSuggestion) {
  const json config = json::parse(R"({"model": {"name": "lenet"}, "data": {"source": "synthetic"}})");
  auto error = [&](const std::string& arg) {
    json c = config;
    return error_text_of([&] { apply_overrides(c, {"epochs=2", arg}); });
  };
  for (const char* arg : {"--epochs=1", "--lr=0.1", "--train.epochs=3", "-lr=0.1", "--data.train_transforms.0.p=0.3"}) {
    const std::string bare = std::string(arg).substr(std::string(arg).find_first_not_of('-'));
    EXPECT_EQ(error(arg), "argument '" + std::string(arg) + "': did you mean " + bare +
                              "? kiln takes key=value without dashes");
  }
  EXPECT_EQ(error("--epochs"), "argument '--epochs': kiln takes key=value without dashes: epochs=VALUE (e.g. epochs=3)");
  EXPECT_HAS(error("--help"), "argument '--help': help goes right after the command (kiln <command> --help)");
  EXPECT_HAS(error("-1"), "argument '-1' is not key=value");  // a value typed apart from its key: no dashed key
  EXPECT_EQ(error("epohcs=1"),
            "argument 'epohcs=1': unknown key epohcs (did you mean epochs (train.epochs)?); short forms: epochs, batch, "
            "device, lr, precision, workers, seed, resume, name, checkpoint, weights, model; any other key by its "
            "dotted path, e.g. train.epochs=3");
  EXPECT_HAS(error("btach=8"), "argument 'btach=8': unknown key btach (did you mean batch (data.batch_size)?)");
  EXPECT_HAS(error("batch_size=8"), "(did you mean batch (data.batch_size)?)");
  EXPECT_HAS(error("nmae=x"), "(did you mean name?)");  // a short form that is its own path
  // A dotted key is its section reader's to judge (unknown key train.epohcs, did you mean train.epochs).
  json c = config;
  apply_overrides(c, {"train.epohcs=1"});
  EXPECT_EQ(c["train"]["epohcs"], 1);
}

// Every key a config's top level takes, and every short form, is still applied as typed: the short-form
// check refuses only keys that are neither (the top-level keys from the schema, so a new one is covered).
TEST(Overrides, TopLevelKeysAndShortFormsAreNotTakenForTypos) {
  std::vector<std::string> keys = {"epochs", "batch", "device", "lr", "precision", "workers",
                                   "seed",   "resume", "name",  "checkpoint", "weights", "model"};
  for (const cli::SchemaGroup& g : cli::config_schema())
    if (g.title == "top level")
      for (const cli::SchemaKey& k : g.keys) keys.push_back(k.path);
  EXPECT_GT(keys.size(), 15u);
  for (const std::string& k : keys) {
    json c = json::parse(R"({"model": {"name": "lenet"}, "data": {"source": "synthetic"}})");
    EXPECT_EQ(error_text_of([&] { apply_overrides(c, {k + "=3"}); }), "") << k;
  }
}
