// key=value command-line arguments (tools/cli/kv_args.h): values and defaults, whole numbers with a
// floor, unknown keys listed, config overrides kept in order; and the commands that read them.
#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "tools/cli/commands.h"
#include "tools/cli/kv_args.h"

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
