// The config schema (tools/cli/config_schema.h): every key the readers accept has a meaning and every
// meaning a key; the listing holds what users look up (train.max_steps_per_epoch and its default), every
// registry name, and only keys the readers accept; docs/training.md's key table is what the schema
// generates, and a changed copy of it is caught; kiln_docgen reads both comment styles.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/config.h"
#include "data/pipeline.h"
#include "models/registry.h"
#include "tools/deploy/config.h"
#include "optim/optimizer.h"
#include "optim/lr_schedule.h"
#include "tests/expect_error.h"
#include "tools/cli/config_schema.h"

using namespace kiln;
using namespace kiln::cli;
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const SchemaKey* find_key(const std::string& path, const std::string& group_prefix = "") {
  for (const SchemaGroup& g : config_schema())
    if (g.title.rfind(group_prefix, 0) == 0)
      for (const SchemaKey& k : g.keys)
        if (k.path == path) return &k;
  return nullptr;
}

bool has_group(const std::string& title_part) {
  for (const SchemaGroup& g : config_schema())
    if (g.title.find(title_part) != std::string::npos) return true;
  return false;
}

json minimal() { return json::parse(R"({"model": {"name": "lenet"}, "data": {"source": "synthetic"}})"); }

}  // namespace

TEST(ConfigSchema, EveryKeyHasAMeaningAndEveryMeaningAKey) {
  const std::vector<std::string> problems = schema_problems();
  std::string all;
  for (const std::string& p : problems) all += "  " + p + "\n";
  EXPECT_TRUE(problems.empty()) << problems.size() << " problems:\n" << all;
  for (const SchemaGroup& g : config_schema())
    for (const SchemaKey& k : g.keys) EXPECT_FALSE(k.meaning.empty()) << k.path << " in " << g.title;
}

TEST(ConfigSchema, ListsTrainKeysWithTheirDefaultsAndRanges) {
  const SchemaKey* k = find_key("train.max_steps_per_epoch");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->type, "integer");
  EXPECT_EQ(k->def, "0");
  EXPECT_EQ(k->accepted, ">= 0");
  EXPECT_NE(k->meaning.find("stop each epoch after this many steps"), std::string::npos) << k->meaning;
  EXPECT_EQ(k->source, "tools/engine/train_options.h");
  // The keys just added, like any other.
  for (const char* p : {"train.save_every_steps", "train.save_every_minutes", "train.keep_last"})
    EXPECT_NE(find_key(p), nullptr) << p;
  EXPECT_EQ(find_key("train.keep_last")->def, "1");
  EXPECT_EQ(find_key("train.precision")->accepted, "fp32, bf16, fp16, auto");
  EXPECT_EQ(find_key("train.epochs")->accepted, "1..100000");
  // Raw-read keys get their default from the section's own to_json(); nested sections list their keys.
  EXPECT_EQ(find_key("train.device")->def, "\"\"");
  EXPECT_EQ(find_key("train.ema")->type, "boolean or object");  // true, false or its options
  EXPECT_EQ(find_key("train.ema")->def, "false");
  EXPECT_NE(find_key("train.ema.decay"), nullptr);
  EXPECT_NE(find_key("train.mixup.cutmix_alpha"), nullptr);
  // Required is what the reader refuses to go without, however it says so.
  EXPECT_EQ(find_key("data.source")->def, "required");
  EXPECT_EQ(find_key("data.root", "data.source = mnist")->def, "required");
  EXPECT_EQ(find_key("data.*_transforms[].size", "data.*_transforms[].type = \"random_crop\"")->def, "required");
}

TEST(ConfigSchema, PolymorphicSectionsListEveryVariantWithItsOwnKeys) {
  for (const std::string& n : optimizer_names()) EXPECT_TRUE(has_group("optim.name = \"" + n + "\"")) << n;
  for (const std::string& n : schedule_names())
    EXPECT_NE(find_key("schedule.name")->accepted.find(n), std::string::npos) << n;
  for (const std::string& n : models::model_names())
    EXPECT_NE(find_key("model.name")->accepted.find(n), std::string::npos) << n;
  for (const std::string& t : transform_types())
    EXPECT_NE(find_key("data.*_transforms[].type")->accepted.find(t), std::string::npos) << t;
  for (const std::string& s : data_source_names())
    EXPECT_NE(find_key("data.source")->accepted.find(s), std::string::npos) << s;
  // Each variant's own meaning and default: adamw's weight decay is decoupled, sgd's is L2.
  const SchemaKey* adamw = find_key("optim.weight_decay", "optim.name = \"adamw\"");
  const SchemaKey* sgd = find_key("optim.weight_decay", "optim.name = \"sgd\"");
  ASSERT_TRUE(adamw && sgd);
  EXPECT_EQ(adamw->def, "0.01");
  EXPECT_NE(adamw->meaning.find("decoupled"), std::string::npos) << adamw->meaning;
  EXPECT_NE(sgd->meaning.find("L2"), std::string::npos) << sgd->meaning;
  EXPECT_EQ(find_key("model.num_classes", "model.name = \"lenet\"")->def, "10");
  EXPECT_NE(find_key("model.depth", "model.name = \"resnet_cifar\""), nullptr);
  EXPECT_EQ(find_key("model.depth", "model.name = resnet18"), nullptr);  // only resnet_cifar takes depth
}

// What the listing says is accepted, is: each train, data and top-level key set to its listed default
// passes the readers (kiln config show's resolve_config), and a misspelt key does not.
TEST(ConfigSchema, ListedKeysAreAcceptedAtTheirDefaults) {
  int tried = 0;
  for (const SchemaGroup& g : config_schema()) {
    if (g.title != "train" && g.title != "data (every source)") continue;
    for (const SchemaKey& k : g.keys) {
      if (k.def.empty() || k.def == "required" || k.path.find('[') != std::string::npos) continue;
      json c = minimal();
      const std::string section = k.path.substr(0, k.path.find('.'));
      const std::string rest = k.path.substr(k.path.find('.') + 1);
      if (rest.find('.') != std::string::npos) continue;  // nested: their parent's object is listed
      c[section][rest] = json::parse(k.def);
      EXPECT_NO_THROW(resolve_config(c)) << k.path << " = " << k.def;
      ++tried;
    }
  }
  EXPECT_GT(tried, 40);
  json c = minimal();
  c["train"]["max_step_per_epoch"] = 3;
  kiln::testing::expect_error([&] { resolve_config(c); }, {"unknown key train.max_step_per_epoch",
                                                           "did you mean train.max_steps_per_epoch"});
}

TEST(ConfigSchema, HelpTextAndMarkdownCarryEveryKey) {
  const std::string text = schema_text(), md = schema_markdown();
  EXPECT_NE(text.find("  train.max_steps_per_epoch  integer, default 0; accepted: >= 0\n"), std::string::npos);
  EXPECT_NE(md.find("| `train.max_steps_per_epoch` | integer | `0` | &gt;= 0 | stop each epoch"), std::string::npos);
  for (const SchemaGroup& g : config_schema())
    for (const SchemaKey& k : g.keys) {
      EXPECT_NE(text.find("  " + k.path + "  "), std::string::npos) << k.path;
      EXPECT_NE(md.find("| `" + k.path + "` |"), std::string::npos) << k.path;
    }
}

TEST(ConfigSchema, DocsTableIsTheGeneratedOne) {
  const std::string doc = read_text(fs::path(KILN_SOURCE_DIR) / "docs/training.md");
  EXPECT_EQ(docs_table_mismatch(doc), "");
  // A changed copy fails, naming the line and the command that regenerates it.
  std::string changed = doc;
  const std::string line = "| `train.max_steps_per_epoch` | integer | `0` |";
  const size_t at = changed.find(line);
  ASSERT_NE(at, std::string::npos);
  changed.replace(at, line.size(), "| `train.max_steps_per_epoch` | integer | `10` |");
  const std::string m = docs_table_mismatch(changed);
  EXPECT_NE(m.find("the docs have \"| `train.max_steps_per_epoch` | integer | `10` |"), std::string::npos) << m;
  EXPECT_NE(m.find("kiln config keys --markdown doc=docs/training.md"), std::string::npos) << m;
  // A key missing from the docs, and missing markers, fail too; regenerating restores the table.
  std::string dropped = doc;
  const size_t row = dropped.find("| `train.keep_last` |");
  ASSERT_NE(row, std::string::npos);
  dropped.erase(row, dropped.find('\n', row) + 1 - row);
  EXPECT_NE(docs_table_mismatch(dropped), "");
  EXPECT_EQ(with_docs_table(dropped), doc);
  EXPECT_NE(docs_table_mismatch("# no table here\n").find("markers are missing"), std::string::npos);
}

// kiln_docgen: both comment styles (preceding `///` lines; a trailing `///` with `///` lines continuing
// it), several names in one declaration, `//` members skipped, methods and nested types ignored.
TEST(ConfigSchema, DocgenExtractsFieldComments) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_docgen_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "x.h") << "struct AOptions : Base {\n"
                                "  /// first line\n"
                                "  /// second line\n"
                                "  int64_t alpha = 1;\n"
                                "  std::string beta = \"{\";  /// trailing\n"
                                "                            /// continued\n"
                                "  double gamma = 0.5;  /// own\n"
                                "  bool hidden = false;  // not a key\n"
                                "  /// the lists\n"
                                "  std::string left, right;\n"
                                "  static AOptions from_json(const json& j);\n"
                                "  struct Inner { /// inner\n int x; };\n"
                                "};\n";
  const std::string cmd = "'" + std::string(KILN_BINARY_DIR) + "/tools/cli/kiln_docgen' '" + (dir / "out.cpp").string() +
                          "' '" + dir.string() + "' '" + (dir / "x.h").string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string out = read_text(dir / "out.cpp");
  EXPECT_NE(out.find(R"({"AOptions", "alpha", R"kiln_doc(first line second line)kiln_doc", "x.h"})"), std::string::npos) << out;
  EXPECT_NE(out.find(R"({"AOptions", "beta", R"kiln_doc(trailing continued)kiln_doc")"), std::string::npos) << out;
  EXPECT_NE(out.find(R"({"AOptions", "gamma", R"kiln_doc(own)kiln_doc")"), std::string::npos) << out;
  EXPECT_NE(out.find(R"({"AOptions", "left", R"kiln_doc(the lists)kiln_doc")"), std::string::npos) << out;
  EXPECT_NE(out.find(R"({"AOptions", "right", R"kiln_doc(the lists)kiln_doc")"), std::string::npos) << out;
  EXPECT_EQ(out.find("hidden"), std::string::npos) << out;
  EXPECT_EQ(out.find("from_json"), std::string::npos) << out;
  EXPECT_NE(out.find(R"({"AOptions", "Base"})"), std::string::npos) << out;
  fs::remove_all(dir);
}

// The ImageNet configs say data.workers "auto"; data.workers=4 on the command line (which keeps the text
// of a key the file holds as a string) must still give 4 workers, not an error.
TEST(ConfigSchema, ANumberOverAnAutoKeyOnTheCommandLine) {
  json c = minimal();
  c["data"]["workers"] = "auto";
  apply_overrides(c, {"data.workers=4", "data.prefetch=6"});
  const json r = resolve_config(c);
  EXPECT_EQ(r["data"]["workers"], 4) << r["data"].dump();
  EXPECT_EQ(r["data"]["prefetch"], 6);
  apply_overrides(c, {"workers=auto"});
  EXPECT_GE(resolve_config(c)["data"]["workers"].get<int64_t>(), 1);
}
