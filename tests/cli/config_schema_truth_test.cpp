// The config schema tells the truth (issue 44): for every key `kiln config keys` lists (tools/cli/config_schema.h),
// what the listing states is what the key's reader accepts. The reader is the group's own
// (SchemaGroup::reader: the section's reader as a run uses it, written back as `kiln config show` writes it),
// run over its sample with the key changed:
//   - required: the sample without the key is refused; a stated default D: without the key it is accepted and
//     resolves to what the key set to D resolves to, and the resolved config shows the key (or another value);
//   - type: a value of each kind the type names (the accepted range's low end, a listed choice, the default)
//     is accepted, and a value of every other kind (true, 7, 0.5, "auto", "x", [7], ["x"], {"x": 1}) refused;
//   - accepted range "lo..hi" / ">= lo": one below lo and one above hi are refused;
//   - the meaning: a "(default X)" it repeats is the listed default, and "(required" only on a required key;
//     what only the text can say (data.batch_size is the global batch) is listed in kMeaningFacts.
// Data-driven over the whole schema: a new key is checked by itself; what a generic check cannot judge is
// listed in kExempt, with why. A failure names the key, its group, what the listing states and what the reader did.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tools/cli/config_schema.h"

using namespace kiln;
using namespace kiln::cli;

namespace {

// What a generic check cannot judge: the key, the check skipped ("shown": its default appears in no resolved
// config; "low end": its range's low end needs another key changed too) and why. The key's other checks run.
struct Exemption {
  std::string check, why;
};
const std::multimap<std::string, Exemption> kExempt = {
    {"data.holdout_seed", {"shown", "written only with data.holdout > 0 (DataConfig::to_json)"}},
    {"data.*_transforms[].mode", {"shown", "horizontal_flip writes it only when not \"random\" "
                                           "(HorizontalFlipOptions::to_json), so that the resolved configs and "
                                           "sweep plans made before the key existed resolve the same"}},
    {"optim.lr_mult", {"shown", "written only when set, and each prefix must name parameters of the model, which the "
                                "optim section's reader alone does not have (kiln config show checks them)"}},
    {"train.loss_scaler.init_scale", {"low end", "the reader requires min_scale <= init_scale, and min_scale's default "
                                                 "is 1: the low end 1e-30 needs min_scale lowered too"}},
};

bool exempt(const SchemaKey& k, const std::string& check) {
  const auto [from, to] = kExempt.equal_range(k.path);
  return std::any_of(from, to, [&](const auto& e) { return e.second.check == check; });
}

// The meanings that say something no reader call can check, and a phrase each must hold (docs/training.md
// states these): the meaning is text, so the facts are listed here by hand.
const std::map<std::string, std::string> kMeaningFacts = {
    {"data.batch_size", "global"},  // the trainer divides it by the ranks (docs/training.md, "Batch size")
};

struct Failures {
  std::vector<std::string> all;
  void add(const SchemaGroup& g, const SchemaKey& k, const std::string& what) {
    all.push_back(k.path + " [" + g.title + "]: " + what);
  }
};

json::json_pointer pointer_of(const SchemaGroup& g, const SchemaKey& k) {
  std::string rel = g.reader.section.empty() ? k.path : k.path.substr(g.reader.section.size() + 1);
  std::replace(rel.begin(), rel.end(), '.', '/');
  return json::json_pointer("/" + rel);
}

json without(json sample, const json::json_pointer& p) {
  if (sample.contains(p)) sample[p.parent_pointer()].erase(p.back());
  return sample;
}

json with_value(json sample, const json::json_pointer& p, const json& v) {
  sample[p] = v;
  return sample;
}

// Runs the group's reader: its error, or nullopt when it accepts (`out`: what it resolved to).
std::optional<std::string> refusal(const SchemaGroup& g, const json& sample, json* out = nullptr) {
  try {
    json r = g.reader.resolve(sample);
    if (out) *out = std::move(r);
    return std::nullopt;
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
}

// The alternatives of a listed type: `integer or "auto"` -> {integer, "auto"}.
std::vector<std::string> alternatives(const std::string& type) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t next; (next = type.find(" or ", at)) != std::string::npos; at = next + 4) out.push_back(type.substr(at, next - at));
  out.push_back(type.substr(at));
  return out;
}

bool all_of_kind(const json& v, bool (json::*is)() const noexcept) {
  return std::all_of(v.begin(), v.end(), [&](const json& e) { return (e.*is)(); });
}

// Whether `v` is a value of the kind `alt` names.
bool fits(const json& v, const std::string& alt) {
  if (alt == "JSON") return true;
  if (alt == "boolean") return v.is_boolean();
  if (alt == "integer") return v.is_number_integer();
  if (alt == "number") return v.is_number();
  if (alt == "string") return v.is_string();
  if (alt == "object") return v.is_object();
  if (alt.rfind("list", 0) == 0) {
    if (!v.is_array()) return false;
    if (alt == "list of numbers") return all_of_kind(v, &json::is_number);
    if (alt == "list of integers") return all_of_kind(v, &json::is_number_integer);
    if (alt == "list of strings") return all_of_kind(v, &json::is_string);
    return alt == "list";
  }
  if (alt.size() > 1 && alt.front() == '"') return v == json::parse(alt);  // a literal: "auto"
  ADD_FAILURE() << "the test does not know the type \"" << alt << "\" (teach fits() and accepted_value())";
  return false;
}

bool fits_type(const json& v, const std::string& type) {
  const std::vector<std::string> alts = alternatives(type);
  return std::any_of(alts.begin(), alts.end(), [&](const std::string& a) { return fits(v, a); });
}

// An accepted range "lo..hi" or ">= lo" (hi: none when absent).
struct Range {
  double lo = 0;
  std::optional<double> hi;
};
std::optional<Range> range_of(const std::string& accepted) {
  if (accepted.rfind(">= ", 0) == 0) return Range{std::stod(accepted.substr(3)), std::nullopt};
  const size_t dots = accepted.find("..");
  if (dots == std::string::npos || dots == 0) return std::nullopt;
  try {
    size_t used_lo = 0, used_hi = 0;
    Range r{std::stod(accepted.substr(0, dots), &used_lo), std::stod(accepted.substr(dots + 2), &used_hi)};
    if (used_lo == dots && used_hi == accepted.size() - dots - 2) return r;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// The listed choices ("fp32, bf16, fp16, auto"), empty when `accepted` is a range or prose.
std::vector<std::string> choices_of(const std::string& accepted) {
  if (accepted.empty() || range_of(accepted)) return {};
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t next; (next = accepted.find(", ", at)) != std::string::npos; at = next + 2) out.push_back(accepted.substr(at, next - at));
  out.push_back(accepted.substr(at));
  for (const std::string& c : out)
    if (c.find(' ') != std::string::npos) return {};  // prose, not a list of choices
  return out;
}

// A value of the kind `alt` names that the listing says is accepted; nullopt where it names none.
std::optional<json> accepted_value(const SchemaKey& k, const std::string& alt, const json& sample_value) {
  const std::optional<json> def =
      k.def.empty() || k.def == "required" ? std::nullopt : std::optional<json>(json::parse(k.def));
  auto from = [&](const json& v) { return fits(v, alt) ? std::optional<json>(v) : std::nullopt; };
  const bool low_end = range_of(k.accepted) && !exempt(k, "low end");  // the range's low end is accepted
  const double lo = low_end ? range_of(k.accepted)->lo : 0.0;
  if (alt == "integer" && low_end) return json(static_cast<int64_t>(lo));
  if (alt == "number" && low_end) return json(lo);
  if (alt == "string" && !choices_of(k.accepted).empty()) return json(choices_of(k.accepted)[0]);
  if (alt == "boolean") return json(!(def && def->is_boolean() && def->get<bool>()));
  if (alt.front() == '"') return json::parse(alt);
  if (alt == "JSON") return std::nullopt;
  if (def && from(*def)) return def;
  if (!sample_value.is_null() && from(sample_value)) return sample_value;
  if (alt == "object") return json::object();
  if (alt == "integer") return json(1);
  if (alt == "number") return json(0.5);
  return std::nullopt;
}

// Whether some other value of the default's kind, accepted by the reader, resolves differently from `bare`
// (a key the resolved config writes only when it is not at its default).
bool changes_resolution(const SchemaGroup& g, const json::json_pointer& p, const json& def, const json& bare) {
  std::vector<json> others;
  if (def.is_boolean()) others = {!def.get<bool>()};
  if (def.is_number_integer()) others = {def.get<int64_t>() + 1, def.get<int64_t>() - 1};
  if (def.is_number_float()) others = {def.get<double>() / 2, def.get<double>() + 1, def.get<double>() - 1};
  if (def.is_string()) others = {"x", def.get<std::string>() + "x"};
  if (def.is_array()) others = {json::array({"x"}), json::array({1})};
  if (def.is_object()) others = {json{{"x", 1}}};
  for (const json& v : others) {
    json r;
    if (!refusal(g, with_value(g.reader.sample, p, v), &r) && r != bare) return true;
  }
  return false;
}

// Where two resolved sections differ: "/workers: 2 / 3, /prefetch: 4 / 5".
std::string differences(const json& a, const json& b) {
  std::string out;
  for (const json& op : json::diff(a, b)) {
    const json::json_pointer at(op["path"].get<std::string>());
    out += (out.empty() ? "" : ", ") + at.to_string() + ": " + (a.contains(at) ? a.at(at).dump() : "(none)") + " / " +
           (b.contains(at) ? b.at(at).dump() : "(none)");
  }
  return out;
}

// Required, or the stated default: accepted without the key and resolved as the key set to it.
void check_default(const SchemaGroup& g, const SchemaKey& k, Failures& f) {
  const json::json_pointer p = pointer_of(g, k);
  json bare;
  const std::optional<std::string> err = refusal(g, without(g.reader.sample, p), &bare);
  if (k.def == "required") {
    if (!err) f.add(g, k, "listed as required, but the reader accepts the config without it");
    return;
  }
  if (err) return f.add(g, k, "listed as optional (default " + (k.def.empty() ? "none" : k.def) +
                                   "), but the reader refuses the config without it: " + *err);
  if (k.def.empty()) return;
  json given;
  if (const std::optional<std::string> e = refusal(g, with_value(g.reader.sample, p, json::parse(k.def)), &given))
    return f.add(g, k, "the reader refuses the listed default " + k.def + ": " + *e);
  if (given != bare)
    f.add(g, k, "the listed default " + k.def + " is not the reader's: resolved without the key / with it: " +
                    differences(bare, given));
  if (!bare.contains(p) && !changes_resolution(g, p, json::parse(k.def), bare) && !exempt(k, "shown"))
    f.add(g, k, "no resolved config shows the key, so its default " + k.def +
                    " cannot be checked: list it in kExempt (\"shown\") with why");
}

// A value of each kind the type names is accepted; one of every other kind is refused.
void check_type(const SchemaGroup& g, const SchemaKey& k, Failures& f) {
  const json::json_pointer p = pointer_of(g, k);
  const json sample_value = g.reader.sample.contains(p) ? g.reader.sample.at(p) : json();
  for (const std::string& alt : alternatives(k.type)) {
    const std::optional<json> v = accepted_value(k, alt, sample_value);
    if (!v) continue;
    if (const std::optional<std::string> e = refusal(g, with_value(g.reader.sample, p, *v)))
      f.add(g, k, "listed as " + k.type + ", but the reader refuses " + v->dump() + ": " + *e);
  }
  const json others[] = {true, 7, 0.5, "auto", "x", json::array({7}), json::array({"x"}), json{{"x", 1}}};
  for (const json& v : others)
    if (!fits_type(v, k.type) && !refusal(g, with_value(g.reader.sample, p, v)))
      f.add(g, k, "listed as " + k.type + ", but the reader accepts " + v.dump());
}

// One below the accepted range and one above it are refused (the range of the type's integer or number).
void check_range(const SchemaGroup& g, const SchemaKey& k, Failures& f) {
  const std::optional<Range> r = range_of(k.accepted);
  const std::vector<std::string> alts = alternatives(k.type);
  const bool integer = std::count(alts.begin(), alts.end(), "integer") > 0;
  if (!r || (!integer && std::count(alts.begin(), alts.end(), "number") == 0)) return;
  const json::json_pointer p = pointer_of(g, k);
  std::vector<json> outside;
  if (integer) {
    outside.push_back(static_cast<int64_t>(r->lo) - 1);
    if (r->hi) outside.push_back(static_cast<int64_t>(*r->hi) + 1);
  } else {  // beyond the bound by at least 1 and by a millionth of it (1e30 + 1 is 1e30 as a double)
    outside.push_back(r->lo - std::max(1.0, std::abs(r->lo) * 1e-6));
    if (r->hi) outside.push_back(*r->hi + std::max(1.0, std::abs(*r->hi) * 1e-6));
  }
  for (const json& v : outside)
    if (!refusal(g, with_value(g.reader.sample, p, v)))
      f.add(g, k, "the listing accepts " + k.accepted + ", but the reader also accepts " + v.dump());
}

// The default a meaning repeats, "(default X)": the shortest text after it, up to one of ";,: )", that is JSON;
// nullopt where there is none or it is prose ("(default: the model's)", "(default off)").
std::optional<json> stated_default(const std::string& meaning) {
  const std::string tag = "(default ";
  const size_t at = meaning.find(tag);
  if (at == std::string::npos) return std::nullopt;
  const std::string rest = meaning.substr(at + tag.size());
  for (size_t cut = 1; cut <= rest.size(); ++cut) {
    if (cut < rest.size() && std::string(";,: )").find(rest[cut]) == std::string::npos) continue;
    const json v = json::parse(rest.substr(0, cut), nullptr, /*allow_exceptions=*/false);
    if (!v.is_discarded()) return v;
  }
  return std::nullopt;
}

// Whether the schema lists keys under `k` (an object section: its default is its keys').
bool has_subkeys(const SchemaKey& k) {
  for (const SchemaGroup& g : config_schema())
    for (const SchemaKey& o : g.keys)
      if (o.path.rfind(k.path + ".", 0) == 0 || o.path.rfind(k.path + "[", 0) == 0) return true;
  return false;
}

// The meaning repeats the listing's default and requiredness, and holds its listed facts.
void check_meaning(const SchemaGroup& g, const SchemaKey& k, Failures& f) {
  const std::optional<json> said = stated_default(k.meaning);
  const bool says_required = k.meaning.find("(required") != std::string::npos;
  if (says_required && k.def != "required")
    f.add(g, k, "the meaning says required, the listing " + (k.def.empty() ? "no default" : "default " + k.def));
  if (said && k.def == "required") f.add(g, k, "listed as required, but the meaning states a default " + said->dump());
  else if (said && k.def.empty() && !has_subkeys(k))
    f.add(g, k, "the meaning states the default " + said->dump() + ", the listing none");
  else if (said && !k.def.empty() && json::parse(k.def) != *said)
    f.add(g, k, "the meaning states the default " + said->dump() + ", the listing " + k.def);
  const auto fact = kMeaningFacts.find(k.path);
  if (fact != kMeaningFacts.end() && k.meaning.find(fact->second) == std::string::npos)
    f.add(g, k, "the meaning should say \"" + fact->second + "\": \"" + k.meaning + "\"");
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += "  " + x + "\n";
  return s;
}

}  // namespace

TEST(ConfigSchemaTruth, EveryListedKeyIsWhatItsReaderAccepts) {
  Failures f;
  int keys = 0;
  for (const SchemaGroup& g : config_schema()) {
    ASSERT_TRUE(g.reader.resolve) << g.title;
    ASSERT_EQ(refusal(g, g.reader.sample), std::nullopt) << g.title << ": the reader refuses its own sample";
    for (const SchemaKey& k : g.keys) {
      check_default(g, k, f);
      check_type(g, k, f);
      check_range(g, k, f);
      check_meaning(g, k, f);
      ++keys;
    }
  }
  EXPECT_GT(keys, 200);
  EXPECT_TRUE(f.all.empty()) << f.all.size() << " disagreements between the listing and the readers:\n" << joined(f.all);
}

// The listed facts are keys the schema lists; the exemptions too.
TEST(ConfigSchemaTruth, TheHandListsNameListedKeys) {
  auto listed = [](const std::string& path) {
    for (const SchemaGroup& g : config_schema())
      for (const SchemaKey& k : g.keys)
        if (k.path == path) return true;
    return false;
  };
  for (const auto& [path, why] : kMeaningFacts) EXPECT_TRUE(listed(path)) << path;
  for (const auto& [path, e] : kExempt) EXPECT_TRUE(listed(path)) << path;
}

// The checks themselves: "(default X)" read from a meaning, types and ranges read from the listing.
TEST(ConfigSchemaTruth, ReadsWhatTheListingStates) {
  EXPECT_EQ(stated_default("a (default 0; for tests)"), json(0));
  EXPECT_EQ(stated_default("a (default [0.08, 1])"), json::parse("[0.08, 1]"));
  EXPECT_EQ(stated_default("x (default \"auto\")"), json("auto"));
  EXPECT_EQ(stated_default("x (default true: without it ...)"), json(true));
  EXPECT_EQ(stated_default("x (default: the model's)"), std::nullopt);
  EXPECT_EQ(stated_default("x (default off)"), std::nullopt);
  EXPECT_EQ(alternatives("integer or \"auto\""), (std::vector<std::string>{"integer", "\"auto\""}));
  EXPECT_TRUE(fits_type("auto", "integer or \"auto\""));
  EXPECT_FALSE(fits_type("x", "integer or \"auto\""));
  EXPECT_FALSE(fits_type(0.5, "integer"));
  EXPECT_TRUE(fits_type(7, "number"));
  EXPECT_EQ(range_of("1..64")->lo, 1);
  EXPECT_EQ(*range_of("0..1e+06")->hi, 1e6);
  EXPECT_FALSE(range_of(">= 0")->hi);
  EXPECT_EQ(choices_of("fp32, bf16"), (std::vector<std::string>{"fp32", "bf16"}));
  EXPECT_TRUE(choices_of("an integer >= 1, -1 or a fraction in (0, 1)").empty());
}
