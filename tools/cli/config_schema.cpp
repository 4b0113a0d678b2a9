// The config schema (see config_schema.h): the readers run in recording mode over a sample of each
// section and variant, joined with the `///` meanings kiln_docgen extracted; and the resolved config.
#include "tools/cli/config_schema.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/registry.h"
#include "data/config.h"
#include "data/pipeline.h"
#include "layers/loss.h"
#include "layers/registry.h"
#include "models/registry.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "optim/param.h"
#include "optim/registry.h"
#include "tools/engine/train_options.h"
#include "tools/engine/finetune.h"
#include "tools/engine/replica_run.h"

namespace kiln::cli {

namespace {

// Where the meanings of a variant's keys are: the keys directly under `prefix` (relative to the
// variant's object; "" = the object itself) are fields of `structs` (or of their bases).
struct DocScope {
  std::string prefix;
  std::vector<std::string> structs;
};

// One variant of a section: its reader run over its sample.
struct Variant {
  std::string value;             // the selector's value ("sgd"); "" for a plain section
  std::string base;              // the JSON path its reader reads ("optim", "data.train_transforms[0]")
  std::vector<DocScope> docs;
  json sample;                           // the object at `base` the reader reads
  std::function<json(const json&)> read;  // runs the reader on a sample; the section written back, resolved
  std::vector<std::pair<std::string, std::string>> key_docs = {};  // meanings given in code (a program's component)
  std::string summary = "";                                        // what the component is, one line
};

struct Section {
  std::string name;      // "optim"; the display path of its object ("data.*_transforms[]")
  std::string selector;  // the key that picks a variant ("name", "type", "source"); "" for a plain section
  std::string selector_doc;      // the struct documenting the selector key
  std::string selector_default;  // its default as JSON; "" = required
  std::vector<Variant> variants;
};

json obj(std::initializer_list<std::pair<const std::string, json>> kv) { return json(std::map<std::string, json>(kv)); }

// --- the sections -------------------------------------------------------------------------------
// Every component of a polymorphic section comes from its registry (core/registry.h), kiln's and a
// program's own alike, with the sample its reader accepts and the structs (or, for a program's own,
// the meanings given in code) that document its keys: there is no second list of components here.

json with(json sample, const std::string& key, const std::string& value, const ComponentDocs& docs) {
  sample.update(docs.sample);
  sample[key] = value;
  return sample;
}

// A variant of a registered component: its scope of documentation, extended with the section's own structs.
template <class Entry>
Variant registered(const Entry& e, const std::string& selector, const std::string& base, json sample,
                   std::vector<std::string> section_structs, std::function<json(const json&)> read) {
  std::vector<std::string> structs = e.docs.structs;
  for (std::string& t : section_structs)
    if (std::find(structs.begin(), structs.end(), t) == structs.end()) structs.push_back(std::move(t));
  return {e.name, base, {{"", structs}}, with(std::move(sample), selector, e.name, e.docs), std::move(read),
          e.docs.keys, e.docs.summary};
}

// The model section read as build_model reads it (the same registry lookup, so the same errors for a
// missing, mistyped or unknown name), a registry model by its options reader rather than built.
json read_model(const json& j) {
  if (j.is_object() && j.contains("layers")) return models::build_model(j, "model")->to_json();
  return models::read_model_options(j, "model");
}

// The data section as a run reads it (resolve_config): data.batch_size -1 or a fraction asks AutoBatch,
// which chooses when the run starts, so it is kept as given; the rest is DataConfig's, written back.
json resolve_data(json data, double autobatch_fraction) {
  const trainer::BatchRequest batch = trainer::read_batch(data, autobatch_fraction);
  const json given = batch.auto_fraction > 0 ? data["batch_size"] : json();
  if (batch.auto_fraction > 0) data["batch_size"] = batch.global;
  json out = DataConfig::from_json(data, "data").to_json();
  if (batch.auto_fraction > 0) out["batch_size"] = given;
  return out;
}

// The top level: read_sections, the trainer's own reader (tools/engine/replica_run.h).
Section top_section() {
  return {"", "", "", "", {{"", "", {{"", {"TopKeys"}}},
                            obj({{"name", "run"}, {"model", obj({{"name", "lenet"}})},
                                 {"data", obj({{"source", "synthetic"}})}, {"optim", obj({{"name", "sgd"}})},
                                 {"schedule", obj({{"name", "constant"}})}, {"train", json::object()}}),
                            [](const json& j) { return resolve_config(j); }}}};
}

Section model_section() {
  Section model{"model", "name", "ModelKeys", "", {}};
  for (const auto& e : models::model_registry().entries())
    model.variants.push_back(registered(e, "name", "model", json::object(), {"ModelKeys"}, read_model));
  model.variants.push_back({"(none: a custom \"layers\" list)", "model", {{"", {"ModelKeys"}}},
                            obj({{"layers", json::array({obj({{"type", "relu"}})})}}), read_model});
  return model;
}

Section layer_section() {
  Section layers{"model.layers[]", "type", "LayerKeys", "", {}};
  for (const auto& e : layer_registry().entries())
    layers.variants.push_back(registered(e, "type", "model.layers[0]", json::object(), {"LayerKeys"},
                                         [](const json& j) { return build_layer(j, "model.layers[0]")->to_json(); }));
  return layers;
}

Section data_section() {
  Section data{"data", "source", "DataConfig", "", {}};
  const TrainOptions train;  // AutoBatch's default share of memory, for data.batch_size -1
  for (const std::string& s : data_source_names()) {
    const ComponentDocs& docs = data_source_docs(s);
    const json sample = with(obj({{"train_transforms", json::array()}, {"val_transforms", json::array()},
                                  {"progressive_resize", obj({{"min_size", 8}, {"end_epoch", 2}})}}),
                             "source", s, docs);
    data.variants.push_back({s, "data",
                             {{"", docs.structs}, {"synthetic", {"SyntheticOptions"}}, {"progressive_resize", {"ProgressiveResizeOptions"}}},
                             sample, [f = train.autobatch_fraction](const json& j) { return resolve_data(j, f); },
                             docs.keys, docs.summary});
  }
  return data;
}

Section transform_section() {
  Section transforms{"data.*_transforms[]", "type", "TransformKeys", "", {}};
  for (const auto& e : transform_registry().entries())
    transforms.variants.push_back(registered(e, "type", "data.train_transforms[0]", json::object(), {"TransformKeys"}, [](const json& j) {
      return Pipeline::from_json(json::array({j}), "data.train_transforms").to_json().at(0);
    }));
  return transforms;
}

Section optim_section() {
  Section optim{"optim", "name", "OptimKeys", "", {}};  // required in the section (absent: the top level's default)
  for (const auto& e : optimizer_registry().entries())
    optim.variants.push_back(registered(e, "name", "optim", json::object(), {"OptimKeys"},
                                        [](const json& j) { return make_optimizer(j, {}, "optim")->to_json(); }));
  return optim;
}

Section schedule_section() {
  Section schedule{"schedule", "name", "ScheduleKeys", "", {}};
  for (const auto& e : schedule_registry().entries())
    schedule.variants.push_back(registered(e, "name", "schedule", json::object(), {"ScheduleKeys"}, [](const json& j) {
      return make_schedule(j, ScheduleContext{}, "schedule")->to_json();
    }));
  return schedule;
}

Section train_section() {
  return {"train", "", "", "", {{"", "train",
    {{"", {"TrainOptions"}}, {"ema", {"EmaOptions"}}, {"mixup", {"MixupOptions"}}, {"loss_scaler", {"LossScalerOptions"}},
     {"early_stopping", {"EarlyStoppingOptions"}}},
    // train.ema.decay is read only when given; train.early_stopping's metric and patience are required
    obj({{"ema", obj({{"decay", 0.9998}})}, {"mixup", json::object()}, {"loss_scaler", json::object()},
         {"early_stopping", obj({{"metric", "top1"}, {"patience", 5}})}, {"loss", obj({{"name", "cross_entropy"}})}}),
    [](const json& j) { return TrainOptions::from_json(j, "train").to_json(); }}}};
}

Section loss_section() {
  Section loss{"train.loss", "name", "LossKeys", "", {}};  // required in the object (the string form is the name)
  for (const auto& e : loss_registry().entries())
    loss.variants.push_back(registered(e, "name", "train.loss", json::object(), {"LossKeys"}, [](const json& j) {
      const json options = loss_options(j);
      make_loss(options, LossContext{}, "train.loss");
      return options;
    }));
  return loss;
}

std::vector<Section> sections() {
  return {top_section(),   model_section(), layer_section(),    data_section(),
          transform_section(), optim_section(), schedule_section(), train_section(), loss_section()};
}

// --- meanings ----------------------------------------------------------------------------------------

const FieldDoc* find_doc(const std::string& type, const std::string& field) {
  for (const FieldDoc& d : field_docs())
    if (d.type == type && d.field == field) return &d;
  for (const auto& [derived, base] : struct_bases())
    if (derived == type) return find_doc(base, field);
  return nullptr;
}

// The structs named by a scope, with their bases.
std::vector<std::string> with_bases(const std::vector<std::string>& types) {
  std::vector<std::string> out;
  for (std::string t : types) {
    while (!t.empty() && std::find(out.begin(), out.end(), t) == out.end()) {
      out.push_back(t);
      std::string base;
      for (const auto& [derived, b] : struct_bases())
        if (derived == t) base = b;
      t = base;
    }
  }
  return out;
}

std::string type_of(const json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "list";
  if (v.is_object()) return "object";
  return "JSON";
}

// --- building ------------------------------------------------------------------------------------------

struct Built {
  std::vector<SchemaGroup> groups;
  std::vector<std::string> problems;
};

// The keys a variant's reader asks for, run over its sample under a KeyRecorder; a sample the reader
// refuses is a problem (the component is then listed without its keys: a program's own component that
// fails so does not take `--help` down).
std::optional<std::vector<KeyRecord>> recorded_keys(const Section& sec, const Variant& v, std::vector<std::string>& problems) {
  KeyRecorder rec;
  try {
    v.read(v.sample);
  } catch (const std::exception& e) {
    problems.push_back("the sample of " + (sec.name.empty() ? std::string("the top level") : sec.name) +
                       (v.value.empty() ? "" : " " + sec.selector + " \"" + v.value + "\"") +
                       " was refused (give its required keys in its registration's ComponentDocs::sample, "
                       "core/registry.h): " + e.what());
    return std::nullopt;
  }
  return rec.keys();
}

// A key of a variant, relative to its base, and the scope of structs that documents it.
struct Found {
  const KeyRecord* r;
  std::string rel, field;
  const DocScope* scope;
};

// The records under the variant's base that a scope covers (a key deeper than the scopes, a nested
// list's entries, is its own section's); the selector is listed once, with every variant's value.
std::vector<Found> scoped_keys(const Section& sec, const Variant& v, const std::vector<KeyRecord>& records) {
  std::vector<Found> found;
  for (const KeyRecord& r : records) {
    std::string rel = r.path;
    if (!v.base.empty()) {
      if (r.path.rfind(v.base + ".", 0) != 0) continue;
      rel = r.path.substr(v.base.size() + 1);
    }
    if (rel == sec.selector) continue;
    for (const DocScope& d : v.docs) {
      const std::string head = d.prefix.empty() ? "" : d.prefix + ".";
      if (rel.rfind(head, 0) != 0) continue;
      const std::string f = rel.substr(head.size());
      if (f.find_first_of(".[") == std::string::npos) {
        found.push_back({&r, rel, f, &d});
        break;
      }
    }
  }
  return found;
}

// Which struct of each scope documents this variant first: the one holding most of its keys, then the
// one named like the variant ("center_crop": CenterCropOptions).
std::map<const DocScope*, std::vector<std::string>> ranked_structs(const Variant& v, const std::vector<Found>& found) {
  auto squash = [](std::string n) {
    std::string o;
    for (char c : n)
      if (c != '_') o += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return o;
  };
  std::map<const DocScope*, std::vector<std::string>> ranked;
  for (const DocScope& d : v.docs) {
    std::vector<std::pair<int, std::string>> scored;
    for (const std::string& type : d.structs) {
      int covered = 0;
      const std::vector<std::string> lineage = with_bases({type});
      for (const Found& f : found)
        if (f.scope == &d && std::any_of(lineage.begin(), lineage.end(),
                                         [&](const std::string& t) { return find_doc(t, f.field) != nullptr; }))
          ++covered;
      const bool named = !v.value.empty() && squash(type).rfind(squash(v.value), 0) == 0;
      scored.push_back({-(covered * 2 + (named ? 1 : 0)), type});
    }
    std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [score, t] : scored) ranked[&d].push_back(t);
  }
  return ranked;
}

// The JSON pointer of a dotted relative path ("ema.decay" -> /ema/decay).
json::json_pointer pointer_of(std::string dotted) {
  std::replace(dotted.begin(), dotted.end(), '.', '/');
  return json::json_pointer("/" + dotted);
}

// A key's type, requiredness and default: what its reader noted, else what the resolved defaults or the
// sample hold. Required: the reader refuses the sample without it (whether it says so with require() or later).
void type_and_default(SchemaKey& k, const Found& f, const Variant& v, const std::vector<KeyRecord>& records,
                      const json& defaults) {
  const KeyRecord& r = *f.r;
  k.type = r.type;
  auto below = [&](const char* sep) {
    return std::any_of(records.begin(), records.end(), [&](const KeyRecord& o) { return o.path.rfind(r.path + sep, 0) == 0; });
  };
  const bool parent = below(".") || below("[");
  if (parent && (k.type.empty() || k.type == "JSON")) k.type = below("[") ? "list" : "object";
  bool required = r.required;
  const json::json_pointer at = pointer_of(f.rel);
  if (!required && v.sample.contains(at)) {
    json without = v.sample;
    without[at.parent_pointer()].erase(at.back());
    try {
      v.read(without);
    } catch (const std::exception&) {
      required = true;
    }
  }
  if (required) k.def = "required";
  else if (r.has_default) k.def = r.def.dump();
  const json* resolved = nullptr;
  if (k.path.find('[') == std::string::npos && defaults.contains(pointer_of(k.path))) resolved = &defaults.at(pointer_of(k.path));
  if (k.def.empty() && resolved && !parent && !resolved->is_object()) k.def = resolved->dump();
  if ((k.type.empty() || k.type == "JSON") && resolved && !resolved->is_null()) k.type = type_of(*resolved);
  if ((k.type.empty() || k.type == "JSON") && v.sample.contains(at) && !v.sample.at(at).is_null())
    k.type = type_of(v.sample.at(at));  // the kind of value the sample gives it
  if (k.type.empty()) k.type = "JSON";
}

// A variant's keys: its reader's records under its base, with their meanings (given in code for a
// program's component, else the `///` of its structs). `used` collects the (struct, field) meanings
// that named a key.
std::vector<SchemaKey> variant_keys(const Section& sec, const Variant& v, const json& defaults,
                                    std::set<std::pair<std::string, std::string>>& used, std::vector<std::string>& problems) {
  const std::optional<std::vector<KeyRecord>> recorded = recorded_keys(sec, v, problems);
  if (!recorded) return {};
  const std::vector<KeyRecord>& records = *recorded;
  const std::vector<Found> found = scoped_keys(sec, v, records);
  std::map<const DocScope*, std::vector<std::string>> ranked = ranked_structs(v, found);
  std::vector<SchemaKey> keys;
  for (const Found& f : found) {
    SchemaKey k;
    k.path = sec.name.empty() ? f.rel : sec.name + "." + f.rel;
    type_and_default(k, f, v, records, defaults);
    k.accepted = f.r->accepted;
    for (const auto& [key, meaning] : v.key_docs)
      if (key == f.rel) k.meaning = meaning;
    for (const std::string& t : with_bases(ranked[f.scope])) {
      if (!k.meaning.empty()) break;
      if (const FieldDoc* d = find_doc(t, f.field)) {
        k.meaning = d->doc;
        k.source = d->file;
        used.insert({d->type, d->field});
      }
    }
    if (k.meaning.empty())
      problems.push_back("key " + k.path + (v.value.empty() ? "" : " (" + sec.selector + " " + v.value + ")") +
                         " has no meaning: add a `///` comment to the field '" + f.field + "' of " +
                         join(f.scope->structs, " or ") + ", or give it in the registration's ComponentDocs::keys");
    keys.push_back(k);
  }
  return keys;
}

bool same(const SchemaKey& a, const SchemaKey& b) {
  return a.path == b.path && a.type == b.type && a.def == b.def && a.accepted == b.accepted && a.meaning == b.meaning;
}
bool same_list(const std::vector<SchemaKey>& a, const std::vector<SchemaKey>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), same);
}

void add_section(const Section& sec, const json& defaults, std::set<std::pair<std::string, std::string>>& used,
                 Built& b) {
  std::vector<std::vector<SchemaKey>> per;
  for (const Variant& v : sec.variants) per.push_back(variant_keys(sec, v, defaults, used, b.problems));
  auto reader = [&](size_t v) { return SchemaReader{sec.name, sec.variants[v].sample, sec.variants[v].read}; };
  if (sec.selector.empty()) {
    b.groups.push_back({sec.name.empty() ? "top level" : sec.name, per[0], reader(0)});
    return;
  }
  // The keys every variant has alike, once; then each variant's own, variants with the same keys together.
  SchemaGroup common{sec.name + " (every " + sec.selector + ")", {}, reader(0)};
  SchemaKey sel;
  sel.path = sec.name + "." + sec.selector;
  sel.type = "string";
  sel.def = sec.selector_default.empty() ? "required" : sec.selector_default;
  std::vector<std::string> values;
  for (const Variant& v : sec.variants)
    if (v.value.find(' ') == std::string::npos) values.push_back(v.value);
  sel.accepted = join(values);
  if (const FieldDoc* d = find_doc(sec.selector_doc, sec.selector)) {
    sel.meaning = d->doc;
    sel.source = d->file;
    used.insert({d->type, d->field});
  } else {
    b.problems.push_back("key " + sel.path + " has no meaning: add a `///` comment to the field '" + sec.selector +
                         "' of " + sec.selector_doc);
  }
  common.keys.push_back(sel);
  for (const Variant& v : sec.variants)  // a struct's own field for the selector documents the same key
    for (const DocScope& d : v.docs)
      for (const std::string& t : with_bases(d.structs))
        if (const FieldDoc* f = find_doc(t, sec.selector)) used.insert({f->type, f->field});
  for (const SchemaKey& k : per[0]) {
    bool everywhere = per.size() > 1;
    for (size_t i = 1; i < per.size() && everywhere; ++i)
      everywhere = std::any_of(per[i].begin(), per[i].end(), [&](const SchemaKey& o) { return same(o, k); });
    if (everywhere) common.keys.push_back(k);
  }
  b.groups.push_back(common);
  std::vector<bool> done(per.size(), false);
  for (size_t i = 0; i < per.size(); ++i) {
    if (done[i]) continue;
    auto own = [&](size_t v) {
      std::vector<SchemaKey> o;
      for (const SchemaKey& k : per[v])
        if (std::none_of(common.keys.begin(), common.keys.end(), [&](const SchemaKey& c) { return same(c, k); }))
          o.push_back(k);
      return o;
    };
    const std::vector<SchemaKey> mine = own(i);
    std::vector<std::string> names{sec.variants[i].value};
    for (size_t j = i + 1; j < per.size(); ++j)
      if (!done[j] && same_list(own(j), mine)) {
        done[j] = true;
        names.push_back(sec.variants[j].value);
      }
    if (mine.empty() && names.size() == per.size()) continue;
    const bool quoted = names.size() == 1 && names[0].find(' ') == std::string::npos;
    const std::string& summary = sec.variants[i].summary;  // a registered component's one line, when it is alone
    b.groups.push_back({sec.name + "." + sec.selector + " = " + (quoted ? "\"" + names[0] + "\"" : join(names)) +
                            (names.size() == 1 && !summary.empty() ? ": " + summary : ""),
                        mine, reader(i)});
  }
}

Built build() {
  Built b;
  // The resolved minimal config: the defaults of keys that are read raw (their owner's to_json() says).
  const json defaults =
      resolve_config(obj({{"model", obj({{"name", "lenet"}})}, {"data", obj({{"source", "synthetic"}})}}));
  std::set<std::pair<std::string, std::string>> used;
  std::set<std::string> referenced;
  for (const Section& sec : sections()) {
    add_section(sec, defaults, used, b);
    for (const Variant& v : sec.variants)
      for (const DocScope& d : v.docs)
        for (const std::string& t : with_bases(d.structs)) referenced.insert(t);
    referenced.insert(sec.selector_doc);
  }
  for (const FieldDoc& d : field_docs())
    if (referenced.count(d.type) && !used.count({d.type, d.field}))
      b.problems.push_back("the meaning of " + d.type + "::" + d.field + " (" + d.file +
                           ") names no accepted key: rename the field to its key, or use // for a member that is not one");
  return b;
}

const Built& built() {
  static const Built b = build();
  return b;
}

// "a long text" broken into lines of at most `width`, each indented by `indent`.
std::string wrap(const std::string& text, size_t width, const std::string& indent) {
  std::istringstream words(text);
  std::string w, line, out;
  while (words >> w) {
    if (!line.empty() && line.size() + 1 + w.size() > width) {
      out += indent + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  if (!line.empty()) out += indent + line + "\n";
  return out;
}

// Inside a code span only | needs escaping (entities and backslashes show as typed there).
std::string code_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string md_cell(std::string s) {
  std::string out;
  for (char c : s) {  // Markdown: | ends a cell, <x> reads as a tag, * as emphasis
    if (c == '|') out += "\\|";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '*') out += "\\*";
    else out += c;
  }
  return out;
}

}  // namespace

const std::vector<SchemaGroup>& config_schema() { return built().groups; }
std::vector<std::string> schema_problems() { return built().problems; }

std::string schema_text() {
  std::ostringstream os;
  for (const SchemaGroup& g : config_schema()) {
    if (g.keys.empty()) continue;
    os << "\n" << g.title << ":\n";
    for (const SchemaKey& k : g.keys) {
      os << "  " << k.path << "  " << k.type;
      if (!k.def.empty()) os << (k.def == "required" ? ", required" : ", default " + k.def);
      if (!k.accepted.empty()) os << "; accepted: " << k.accepted;
      os << "\n" << wrap(k.meaning, 96, "      ");
    }
  }
  return os.str();
}

std::string schema_markdown() {
  std::ostringstream os;
  for (const SchemaGroup& g : config_schema()) {
    if (g.keys.empty()) continue;
    os << "\n**" << md_cell(g.title) << "**\n\n| key | type | default | accepted | meaning |\n| --- | --- | --- | --- | --- |\n";
    for (const SchemaKey& k : g.keys)
      os << "| `" << k.path << "` | " << k.type << " | " << (k.def.empty() ? "" : k.def == "required" ? "required" : "`" + code_cell(k.def) + "`")
         << " | " << md_cell(k.accepted) << " | " << md_cell(k.meaning) << " |\n";
  }
  return os.str();
}

namespace {
// The text between the markers: [begin, end) offsets, or npos when the markers are missing.
std::pair<size_t, size_t> table_span(const std::string& doc) {
  const size_t b = doc.find(kDocsTableBegin);
  if (b == std::string::npos) return {std::string::npos, std::string::npos};
  const size_t start = doc.find('\n', b);
  const size_t end = doc.find(kDocsTableEnd, b);
  if (start == std::string::npos || end == std::string::npos || end < start) return {std::string::npos, std::string::npos};
  return {start + 1, end};
}
}  // namespace

std::string docs_table_mismatch(const std::string& doc) {
  const std::string regenerate = "; regenerate it with: build/tools/kiln config keys --markdown doc=docs/training.md";
  const auto [b, e] = table_span(doc);
  if (b == std::string::npos)
    return std::string("the key table's markers are missing (") + kDocsTableBegin + " ... " + kDocsTableEnd + ")" + regenerate;
  const std::string have = doc.substr(b, e - b), want = schema_markdown();
  if (have == want) return "";
  std::istringstream h(have), w(want);
  std::string hl, wl;
  for (int line = 1;; ++line) {
    const bool hm = static_cast<bool>(std::getline(h, hl)), wm = static_cast<bool>(std::getline(w, wl));
    if (!hm && !wm) break;
    if (!hm || !wm || hl != wl)
      return "the key table differs from the config schema at its line " + std::to_string(line) + ": the docs have \"" +
             (hm ? hl : "(end)") + "\", the schema gives \"" + (wm ? wl : "(end)") + "\"" + regenerate;
  }
  return "the key table differs from the config schema" + regenerate;
}

std::string with_docs_table(const std::string& doc) {
  const auto [b, e] = table_span(doc);
  KILN_CHECK(b != std::string::npos, "the file has no key table markers; add the two lines\n", kDocsTableBegin, "\n",
             kDocsTableEnd, "\nwhere the table belongs");
  return doc.substr(0, b) + schema_markdown() + doc.substr(e);
}

json resolve_config(const json& config) {
  trainer::Sections s = trainer::read_sections(config);
  json out = config;
  out["name"] = s.name;
  std::shared_ptr<Module> model = models::build_model(s.model, "model");
  out["model"] = model->to_json();
  out["data"] = resolve_data(s.data, s.train.autobatch_fraction);
  std::vector<ParamRef> params = trainable_params(*model, s.train.freeze, /*show=*/false);
  mark_no_decay_1d(params);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(s.optim, params, "optim");
  out["optim"] = optimizer->to_json();
  out["schedule"] = make_schedule(s.schedule, ScheduleContext{optimizer->lr(), 1, s.train.epochs}, "schedule")->to_json();
  out["train"] = s.train.to_json();
  return out;
}

}  // namespace kiln::cli
