// The config schema: every key a training config accepts, with its type, default, accepted values and
// one line of meaning, for `kiln train --help`, `kiln config keys [--markdown]` and docs/training.md's
// key table; and the resolved config of `kiln config show`.
//
// Where each part comes from (docs/config.md), so that the listing cannot drift from what is accepted:
//   - the keys, types, defaults, ranges and choices: the config's own readers, run in JsonReader's recording
//     mode (core/json_reader.h, KeyRecorder) over a sample of each section and of each variant of the
//     polymorphic ones (model.name, model.layers[].type, data.source, each transform type, optim.name,
//     schedule.name), the variants and their samples taken from the registries themselves
//     (core/registry.h, ComponentDocs): a component a program registers is listed like kiln's own;
//   - the meanings: the `///` comments of the options structs' fields, extracted at build time by
//     kiln_docgen (tools/cli/docgen/main.cpp) into field_docs(); a key that no struct holds (a selector,
//     a section) is documented by a field of the *Keys structs below; a program's component gives its
//     keys' meanings in its registration (ComponentDocs::keys);
//   - schema_problems() lists every key without a meaning and every meaning of a struct the schema
//     reads that names no accepted key; tests/cli/config_schema_test.cpp requires it to be empty.
// Tests: tests/cli/config_schema_test.cpp, tests/cli/config_schema_truth_test.cpp, tests/cli/config_cmd_test.cpp.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/json_reader.h"

namespace kiln::cli {

// One `///` comment of a field, as kiln_docgen extracted it (the generated config_docs.cpp).
struct FieldDoc {
  std::string type;   // the struct, "TrainOptions"
  std::string field;  // "epochs"
  std::string doc;    // the comment, one line
  std::string file;   // "tools/engine/train_options.h"
};
const std::vector<FieldDoc>& field_docs();
const std::vector<std::pair<std::string, std::string>>& struct_bases();  // {struct, its base}

// The keys that no options struct holds as a field, documented for the schema (only their `///` are read).
struct TopKeys {
  /// the run's name: its folder is <train.runs_dir>/<name>, with -2, -3, ... when taken (default "run")
  std::string name;
  /// the network (models/registry.h): {"name": ...} of a registered model, or a custom {"layers": [...]}
  json model;
  /// the data source, its transforms and the loader (data/config.h, docs/data.md)
  json data;
  /// the optimizer (optim/optimizer.h) (default {"name": "sgd", "lr": 0.1})
  json optim;
  /// the learning-rate schedule (optim/lr_schedule.h) (default {"name": "constant"})
  json schedule;
  /// how the run trains: epochs, device, precision, checkpoints, fine-tuning (tools/engine/train_options.h)
  json train;
  /// the kiln that ran it, as a run folder's config.json records it (informational; `kiln train RUN` names
  /// it when this kiln does not accept the file) (default: none)
  json kiln_version;
};
struct ModelKeys {
  /// a registered model (models/registry.h; a program's own too, docs/library.md), or a custom "layers" list
  std::string name;
  /// a custom network instead of a name: a list of layer objects {"type": ..., options}, run in order
  /// like torch.nn.Sequential (parameter names "0.weight", ...)
  json layers;
  /// gradient checkpointing of a custom network: "none", "blocks" or "every:K" (layers/recompute.h)
  std::string checkpoint;
};
struct DataKeys {
  /// source "synthetic": the generated images and labels (data/synthetic.h)
  json synthetic;
};
struct LayerKeys {
  /// a registered layer type (layers/registry.h); its options follow
  std::string type;
  /// sequential: the nested list of layer objects
  json layers;
};
struct TransformKeys {
  /// a registered transform type (data/pipeline.h); its options follow; normalize, if present, comes last
  std::string type;
};
struct OptimKeys {
  /// a registered optimizer (optim/registry.h) (required in an optim section; without the section:
  /// {"name": "sgd", "lr": 0.1})
  std::string name;
  /// per-part learning rates: {"<parameter-name prefix>": factor}; the longest matching prefix wins
  /// (docs/finetune.md) (default {}: every parameter at lr)
  json lr_mult;
};
struct ScheduleKeys {
  /// a registered learning-rate schedule (optim/registry.h) (required in a schedule section; without the
  /// section: {"name": "constant"})
  std::string name;
};

// One accepted key.
struct SchemaKey {
  std::string path;      // "train.max_steps_per_epoch", "data.*_transforms[].size", "model.layers[].stride"
  std::string type;      // "integer", "number", "boolean", "string", "list of numbers", "object", "JSON", ...
  std::string def;       // the default as JSON ("0", "\"fp32\""), "required", or "" where none applies
  std::string accepted;  // "0..100000", ">= 0", "fp32, bf16, fp16, auto", or ""
  std::string meaning;   // one line
  std::string source;    // the header that documents it ("tools/engine/train_options.h")
};
// The reader of a group's keys, so that the listing can be held against what it accepts
// (tests/cli/config_schema_truth_test.cpp): the section's own reader, run as a run reads that section.
struct SchemaReader {
  std::string section;  // the prefix of the group's key paths: "train", "data.*_transforms[]", "" (the top level)
  json sample;          // an object of that section the reader accepts: the group's first variant, its required keys given
  // Reads such an object and writes it back, every default filled in (the section's to_json(), as `kiln config
  // show` gives it; a registry model's options are read, not built); throws what the reader throws.
  std::function<json(const json&)> resolve;
};

// The keys of one section, or of one variant of a polymorphic section.
struct SchemaGroup {
  std::string title;  // "train", "optim (every name)", "optim.name = \"adamw\"", "model.name = resnet18, resnet34"
  std::vector<SchemaKey> keys;
  SchemaReader reader;
};

// The schema, built once (the readers run over their samples the first time: after every registration).
// Throws if a sample is refused (a registered component whose ComponentDocs::sample lacks a required key).
const std::vector<SchemaGroup>& config_schema();
// Keys without a meaning, meanings (of the structs the schema reads) that name no accepted key; empty when
// help and docs cover exactly what the readers accept.
std::vector<std::string> schema_problems();

// `kiln train --help`'s key listing: each group, then each key on a line with its type, default and
// accepted values and the meaning below it.
std::string schema_text();
// The Markdown table of docs/training.md ("| key | type | default | accepted | meaning |" per group).
std::string schema_markdown();

// docs/training.md's key table lies between these two lines; `kiln config keys --markdown doc=FILE`
// rewrites what is between them in FILE.
constexpr const char* kDocsTableBegin =
    "<!-- config keys: generated by `build/tools/kiln config keys --markdown doc=docs/training.md`; do not edit -->";
constexpr const char* kDocsTableEnd = "<!-- end of config keys -->";
// "" when the table between the markers of `doc` (the text of docs/training.md) is schema_markdown();
// else what differs (the first differing line, or missing markers) and the command that regenerates it.
std::string docs_table_mismatch(const std::string& doc);
// `doc` with the table between its markers replaced by schema_markdown(); throws when it has no markers.
std::string with_docs_table(const std::string& doc);

// The config as a run records it (its config.json), every default filled in: each section read by its
// reader and written back (the model built, the optimizer over its parameters, the schedule), without
// opening data files or training. Errors name the key, as `kiln train` would.
json resolve_config(const json& config);

}  // namespace kiln::cli
