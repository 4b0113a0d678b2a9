// `kiln config show CONFIG|RUN [key=value ...]`: the resolved config, every default filled in (the JSON a
// run records as its config.json, without training or opening data files); `kiln config keys [--markdown]`:
// every key a config accepts (tools/cli/config_schema.h; --markdown writes docs/training.md's key table).
// Tests: tests/cli/config_cmd_test.cpp.
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/check.h"
#include "tools/cli/commands.h"
#include "tools/cli/config_schema.h"
#include "tools/deploy/config.h"
#include "tools/deploy/model_io.h"

namespace kiln::cli {

namespace {

int config_show(const Args& args) {
  static const char* kUsage =
      "usage: kiln config show CONFIG|RUN [key=value ...]\n"
      "  Prints the config as a run would record it (its config.json): every section read and written back with\n"
      "  every default filled in, the overrides applied (key=value as kiln train takes them: epochs=3, batch=128,\n"
      "  optim.lr=0.05, ...). Nothing is trained and no data file is opened. A RUN folder shows its config.json\n"
      "  resolved. Where data.batch_size asks AutoBatch (-1 or a fraction) it stays as given; train.precision\n"
      "  \"auto\" stays \"auto\" (a run records its choice). Every key: kiln config keys.";
  if (wants_help(args, kUsage)) return 0;
  KILN_CHECK(!args.empty() && args[0].find('=') == std::string::npos, "kiln config show: give a config file or run folder; ",
             kUsage);
  json config = load_config_file(resolve_run_or_config("kiln config show", args[0]).config_file);
  apply_overrides(config, Args(args.begin() + 1, args.end()));
  std::cout << resolve_config(config).dump(2) << "\n";
  return 0;
}

int config_keys(const Args& args) {
  static const char* kUsage =
      "usage: kiln config keys [--markdown [doc=FILE]]\n"
      "  Every key a training config accepts, by section: dotted path, type, default, accepted values and\n"
      "  meaning (as kiln train --help). --markdown: as Markdown tables, docs/training.md's key reference;\n"
      "  doc=FILE rewrites the table between FILE's markers instead of printing it\n"
      "  (kiln config keys --markdown doc=docs/training.md).";
  if (wants_help(args, kUsage)) return 0;
  bool markdown = false;
  std::string doc;
  for (const std::string& a : args) {
    if (a == "--markdown") markdown = true;
    else if (a.rfind("doc=", 0) == 0 && a.size() > 4) doc = a.substr(4);
    else KILN_FAIL("kiln config keys: argument '", a, "' is not accepted; accepted: --markdown, doc=FILE (with --markdown)");
  }
  KILN_CHECK(doc.empty() || markdown, "kiln config keys: doc=", doc, " needs --markdown (the table is Markdown)");
  if (!doc.empty()) {
    std::ifstream in(doc);
    KILN_CHECK(in.good(), "kiln config keys: doc=", doc, ": the file cannot be read");
    std::stringstream text;
    text << in.rdbuf();
    std::string updated;
    try {
      updated = with_docs_table(text.str());
    } catch (const std::exception& e) {
      KILN_FAIL("kiln config keys: doc=", doc, ": ", e.what());
    }
    std::ofstream(doc) << updated;
    std::cout << "updated the key table of " << doc << "\n";
  } else if (markdown) {
    std::cout << schema_markdown();
  }
  else std::cout << "Config keys (kiln train CONFIG key=value ...; docs/config.md):\n" << schema_text();
  return 0;
}

}  // namespace

const std::vector<Command>& config_commands() {
  static const std::vector<Command> kCommands = {
      {"show", "CONFIG|RUN [key=value ...]", "the resolved config, every default filled in (as a run records it)",
       config_show},
      {"keys", "[--markdown]", "every config key: type, default, accepted values, meaning", config_keys},
  };
  return kCommands;
}

int cmd_config(const Args& args) { return dispatch(config_commands(), args, "config"); }

}  // namespace kiln::cli
