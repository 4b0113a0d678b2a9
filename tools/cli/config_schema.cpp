// The config schema (see config_schema.h): the readers run in recording mode over a sample of each
// section and variant, joined with the `///` meanings kiln_docgen extracted; and the resolved config.
#include "tools/cli/config_schema.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/registry.h"
#include "data/config.h"
#include "data/pipeline.h"
#include "layers/registry.h"
#include "models/alexnet.h"
#include "models/lenet.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "models/vgg.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "optim/param.h"
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
};

struct Section {
  std::string name;      // "optim"; the display path of its object ("data.*_transforms[]")
  std::string selector;  // the key that picks a variant ("name", "type", "source"); "" for a plain section
  std::string selector_doc;      // the struct documenting the selector key
  std::string selector_default;  // its default as JSON; "" = required
  std::vector<Variant> variants;
};

json obj(std::initializer_list<std::pair<const std::string, json>> kv) { return json(std::map<std::string, json>(kv)); }

// --- the samples -----------------------------------------------------------------------------------
// Each reader runs over a sample that holds what it requires, plus every optional nested section, so
// that their keys are read too. Only required values are given here; every other key is the reader's.

const std::map<std::string, json>& transform_samples() {
  static const std::map<std::string, json> m = {
      {"random_crop", {{"size", 8}}}, {"random_resized_crop", {{"size", 8}}}, {"resize", {{"size", 8}}},
      {"center_crop", {{"size", 8}}},
      // read only when given
      {"trivial_augment_wide", {{"fill", 0}}}, {"rand_augment", {{"fill", 0}}}, {"random_erasing", {{"value", 0}}}};
  return m;
}

const std::map<std::string, json>& layer_samples() {
  static const std::map<std::string, json> m = {
      {"conv2d", {{"in_channels", 1}, {"out_channels", 1}, {"kernel_size", 1}}},
      {"linear", {{"in_features", 1}, {"out_features", 1}}},
      {"batch_norm2d", {{"num_features", 1}}},
      {"batch_norm1d", {{"num_features", 1}}},
      {"max_pool2d", {{"kernel_size", 2}}},
      {"avg_pool2d", {{"kernel_size", 2}}},
      {"local_response_norm", {{"size", 1}}},
      {"basic_block", {{"in_channels", 1}, {"planes", 1}}},
      {"bottleneck", {{"in_channels", 4}, {"planes", 1}}},
      {"sequential", {{"layers", json::array({{{"type", "relu"}}})}}}};
  return m;
}

const std::map<std::string, json>& source_samples() {
  // Images of a folder or list vary in size: their batches need transforms that end in a fixed size.
  const json fixed = json::array({obj({{"type", "center_crop"}, {"size", 8}})});
  static const std::map<std::string, json> m = {
      {"mnist", {{"root", "r"}}},      {"fashion_mnist", {{"root", "r"}}}, {"cifar10", {{"root", "r"}}},
      {"cifar100", {{"root", "r"}}},   {"synthetic", {{"synthetic", json::object()}}},
      {"image_folder", {{"root", "r"}, {"train_transforms", fixed}, {"val_transforms", fixed}}},
      {"image_list", {{"train_list", "a"}, {"val_list", "b"}, {"train_transforms", fixed}, {"val_transforms", fixed}}}};
  return m;
}

json with(json sample, const std::string& key, const std::string& value, const std::map<std::string, json>& extra) {
  sample[key] = value;
  auto it = extra.find(value);
  if (it != extra.end()) sample.update(it->second);
  return sample;
}

// The model options reader of a registry name (the same from_json the model registry calls; building
// the models themselves would allocate every network's weights) and the structs documenting it. The
// options' to_json() is what the built model's to_json() writes.
std::pair<std::function<json(const json&)>, std::string> model_reader(const std::string& name) {
  using namespace models;
  if (name == "lenet") return {[](const json& j) { return LeNetOptions::from_json(j, "model").to_json(); }, "LeNetOptions"};
  if (name == "alexnet")
    return {[](const json& j) { return AlexNetOptions::from_json(j, "model").to_json(); }, "AlexNetOptions"};
  if (name.rfind("vgg", 0) == 0)
    return {[name](const json& j) { return VGGOptions::from_json(j, "model", name).to_json(); }, "VGGOptions"};
  if (name.rfind("resnet", 0) == 0)
    return {[name](const json& j) { return ResNetOptions::from_json(j, "model", name).to_json(); }, "ResNetOptions"};
  KILN_FAIL("config schema: model \"", name, "\" has no options reader in tools/cli/config_schema.cpp (model_reader)");
}

// The model section read as build_model reads it (the same registry lookup, so the same errors for a
// missing, mistyped or unknown name), a registry model by its options reader rather than built.
json read_model(const json& j) {
  using Reader = std::function<json(const json&)>;
  static const Registry<Reader> readers = [] {
    std::vector<std::pair<std::string, Reader>> entries;
    for (const std::string& name : models::model_names()) entries.push_back({name, model_reader(name).first});
    return Registry<Reader>("a model", entries, ", or a \"layers\" list");
  }();
  if (j.is_object() && j.contains("layers")) return models::build_model(j, "model")->to_json();
  return readers.lookup(j, "model", "name")(j);
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
  for (const std::string& name : models::model_names()) {
    const std::string doc = model_reader(name).second;
    model.variants.push_back({name, "model", {{"", {doc, "CommonOptions", "ModelKeys"}}}, obj({{"name", name}}), read_model});
  }
  model.variants.push_back({"(none: a custom \"layers\" list)", "model", {{"", {"ModelKeys"}}},
                            obj({{"layers", json::array({obj({{"type", "relu"}})})}}), read_model});
  return model;
}

Section layer_section() {
  Section layers{"model.layers[]", "type", "LayerKeys", "", {}};
  for (const std::string& t : layer_types()) {
    json sample = with(json::object(), "type", t, layer_samples());
    layers.variants.push_back({t, "model.layers[0]",
                               {{"", {"Conv2dOptions", "LinearOptions", "BatchNormOptions", "Pool2dOptions",
                                      "AdaptiveAvgPool2dOptions", "DropoutOptions", "LocalResponseNormOptions",
                                      "BlockOptions", "LayerKeys"}}},
                               sample, [](const json& j) { return build_layer(j, "model.layers[0]")->to_json(); }});
  }
  return layers;
}

Section data_section() {
  Section data{"data", "source", "DataConfig", "", {}};
  const TrainOptions train;  // AutoBatch's default share of memory, for data.batch_size -1
  for (const std::string& s : data_source_names()) {
    json sample = with(obj({{"train_transforms", json::array()}, {"val_transforms", json::array()},
                            {"progressive_resize", obj({{"min_size", 8}, {"end_epoch", 2}})}}),
                       "source", s, source_samples());
    const std::vector<std::string> source_docs = {"DataConfig", "DataKeys", "LoaderOptions", "IdxOptions", "CifarOptions",
                                                  "ImageFolderOptions", "ImageListOptions"};
    std::vector<std::string> own;  // the struct of this source's options first: its meaning of "root" wins
    if (s == "mnist" || s == "fashion_mnist") own = {"IdxOptions"};
    else if (s == "cifar10" || s == "cifar100") own = {"CifarOptions"};
    else if (s == "image_folder") own = {"ImageFolderOptions"};
    else if (s == "image_list") own = {"ImageListOptions"};
    own.insert(own.end(), source_docs.begin(), source_docs.end());
    data.variants.push_back({s, "data",
                             {{"", own}, {"synthetic", {"SyntheticOptions"}}, {"progressive_resize", {"ProgressiveResizeOptions"}}},
                             sample, [f = train.autobatch_fraction](const json& j) { return resolve_data(j, f); }});
  }
  return data;
}

Section transform_section() {
  Section transforms{"data.*_transforms[]", "type", "TransformKeys", "", {}};
  for (const std::string& t : transform_types()) {
    transforms.variants.push_back(
        {t, "data.train_transforms[0]",
         {{"", {"RandomCropOptions", "HorizontalFlipOptions", "RandomResizedCropOptions", "ResizeOptions",
                "CenterCropOptions", "ColorJitterOptions", "TrivialAugmentWideOptions", "RandAugmentOptions",
                "RandomErasingOptions", "NormalizeOptions", "TransformKeys"}}},
         with(json::object(), "type", t, transform_samples()),
         [](const json& j) { return Pipeline::from_json(json::array({j}), "data.train_transforms").to_json().at(0); }});
  }
  return transforms;
}

Section optim_section() {
  Section optim{"optim", "name", "OptimKeys", "", {}};  // required in the section (absent: the top level's default)
  for (const std::string& n : optimizer_names()) {
    optim.variants.push_back({n, "optim", {{"", {"SGDOptions", "AdamWOptions", "LARSOptions", "OptimKeys"}}}, obj({{"name", n}}),
                              [](const json& j) { return make_optimizer(j, {}, "optim")->to_json(); }});
  }
  return optim;
}

Section schedule_section() {
  Section schedule{"schedule", "name", "ScheduleKeys", "", {}};
  for (const std::string& n : schedule_names()) {
    schedule.variants.push_back(
        {n, "schedule",
         {{"", {"ConstantLROptions", "StepLROptions", "MultiStepLROptions", "CosineLROptions", "PolyLROptions",
                "ScheduleKeys"}}},
         obj({{"name", n}}), [](const json& j) { return make_schedule(j, ScheduleContext{}, "schedule")->to_json(); }});
  }
  return schedule;
}

Section train_section() {
  return {"train", "", "", "", {{"", "train",
    {{"", {"TrainOptions"}}, {"ema", {"EmaOptions"}}, {"mixup", {"MixupOptions"}}, {"loss_scaler", {"LossScalerOptions"}},
     {"early_stopping", {"EarlyStoppingOptions"}}},
    // train.ema.decay is read only when given; train.early_stopping's metric and patience are required
    obj({{"ema", obj({{"decay", 0.9998}})}, {"mixup", json::object()}, {"loss_scaler", json::object()},
         {"early_stopping", obj({{"metric", "top1"}, {"patience", 5}})}}),
    [](const json& j) { return TrainOptions::from_json(j, "train").to_json(); }}}};
}

std::vector<Section> sections() {
  return {top_section(),   model_section(), layer_section(),    data_section(),
          transform_section(), optim_section(), schedule_section(), train_section()};
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

// A variant's keys: its reader's records under its base, with their meanings. `used` collects the
// (struct, field) meanings that named a key.
std::vector<SchemaKey> variant_keys(const Section& sec, const Variant& v, const json& defaults,
                                    std::set<std::pair<std::string, std::string>>& used, std::vector<std::string>& problems) {
  KeyRecorder rec;
  try {
    v.read(v.sample);
  } catch (const std::exception& e) {
    KILN_FAIL("config schema: the sample of ", sec.name.empty() ? "the top level" : sec.name,
              v.value.empty() ? "" : " " + sec.selector + " \"" + v.value + "\"",
              " was refused (give its required keys in tools/cli/config_schema.cpp): ", e.what());
  }
  const std::vector<KeyRecord> records = rec.keys();
  struct Found {
    const KeyRecord* r;
    std::string rel, field;
    const DocScope* scope;
  };
  std::vector<Found> found;
  for (const KeyRecord& r : records) {
    std::string rel = r.path;
    if (!v.base.empty()) {
      if (r.path.rfind(v.base + ".", 0) != 0) continue;
      rel = r.path.substr(v.base.size() + 1);
    }
    if (rel == sec.selector) continue;  // listed once, with every variant's value
    for (const DocScope& d : v.docs) {
      const std::string head = d.prefix.empty() ? "" : d.prefix + ".";
      if (rel.rfind(head, 0) != 0) continue;
      const std::string f = rel.substr(head.size());
      if (f.find_first_of(".[") == std::string::npos) {
        found.push_back({&r, rel, f, &d});
        break;
      }
    }  // a key deeper than the scopes (a nested list's entries) is its own section's
  }
  // Which struct of a scope documents this variant: the one holding most of its keys, then the one
  // named like the variant ("center_crop": CenterCropOptions).
  auto squash = [](std::string n) {
    std::string o;
    for (char c : n)
      if (c != '_') o += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return o;
  };
  std::map<const DocScope*, std::vector<std::string>> ranked;
  for (const DocScope& d : v.docs) {
    std::vector<std::pair<int, std::string>> scored;
    for (size_t i = 0; i < d.structs.size(); ++i) {
      int covered = 0;
      for (const Found& f : found)
        if (f.scope == &d)
          for (const std::string& t : with_bases({d.structs[i]}))
            if (find_doc(t, f.field)) {
              ++covered;
              break;
            }
      const bool named = !v.value.empty() && squash(d.structs[i]).rfind(squash(v.value), 0) == 0;
      scored.push_back({-(covered * 2 + (named ? 1 : 0)), d.structs[i]});
    }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [score, t] : scored) ranked[&d].push_back(t);
  }
  std::vector<SchemaKey> keys;
  for (const Found& f : found) {
    const KeyRecord& r = *f.r;
    SchemaKey k;
    k.path = sec.name.empty() ? f.rel : sec.name + "." + f.rel;
    k.type = r.type;
    const bool parent = std::any_of(records.begin(), records.end(), [&](const KeyRecord& o) {
      return o.path.rfind(r.path + ".", 0) == 0 || o.path.rfind(r.path + "[", 0) == 0;
    });
    if (parent && (k.type.empty() || k.type == "JSON"))
      k.type = std::any_of(records.begin(), records.end(),
                           [&](const KeyRecord& o) { return o.path.rfind(r.path + "[", 0) == 0; })
                   ? "list"
                   : "object";
    // Required: the reader refuses the sample without it (whether it says so with require() or later).
    bool required = r.required;
    const json::json_pointer at("/" + [&] {
      std::string p = f.rel;
      std::replace(p.begin(), p.end(), '.', '/');
      return p;
    }());
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
    if (k.path.find('[') == std::string::npos) {
      std::string p = k.path;
      std::replace(p.begin(), p.end(), '.', '/');
      const json::json_pointer ptr("/" + p);
      if (defaults.contains(ptr)) resolved = &defaults.at(ptr);
    }
    if (k.def.empty() && resolved && !parent && !resolved->is_object()) k.def = resolved->dump();
    if ((k.type.empty() || k.type == "JSON") && resolved && !resolved->is_null()) k.type = type_of(*resolved);
    if ((k.type.empty() || k.type == "JSON") && v.sample.contains(at) && !v.sample.at(at).is_null())
      k.type = type_of(v.sample.at(at));  // the kind of value the sample gives it
    if (k.type.empty()) k.type = "JSON";
    k.accepted = r.accepted;
    for (const std::string& t : with_bases(ranked[f.scope])) {
      if (const FieldDoc* d = find_doc(t, f.field)) {
        k.meaning = d->doc;
        k.source = d->file;
        used.insert({d->type, d->field});
        break;
      }
    }
    if (k.meaning.empty())
      problems.push_back("key " + k.path + (v.value.empty() ? "" : " (" + sec.selector + " " + v.value + ")") +
                         " has no meaning: add a `///` comment to the field '" + f.field + "' of " +
                         join(f.scope->structs, " or "));
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
    b.groups.push_back(
        {sec.name + "." + sec.selector + " = " + (quoted ? "\"" + names[0] + "\"" : join(names)), mine, reader(i)});
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
