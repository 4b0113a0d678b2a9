// A sweep's plan: read from the command line or a sweep file, checked, written and compared (plan.h).
#include "tools/sweep/plan.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "tools/deploy/config.h"
#include "tools/engine/train_options.h"
#include "tools/engine/run_history.h"

namespace fs = std::filesystem;

namespace kiln::sweep {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// A JSON value as a key=value argument's value: strings as typed, the rest as JSON.
std::string value_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// The overrides' keys spelled out ("lr" -> "optim.lr"), sorted: two variants that set the same keys to the
// same values are one variant however they were written.
std::vector<std::string> canonical(const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> kv;
  for (const std::string& o : overrides) {
    const std::optional<KeyValue> k = split_key_value(o);
    if (k) kv[expand_short_form(k->key)] = k->value;
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : kv) out.push_back(k + "=" + v);
  return out;
}

Variant make_variant(std::string label, std::vector<std::string> overrides) {
  Variant v;
  v.label = std::move(label);
  v.overrides = std::move(overrides);
  return v;
}

// Every combination of the axes, the first axis varying slowest.
std::vector<std::vector<std::string>> grid_points(const std::vector<std::pair<std::string, std::vector<std::string>>>& axes) {
  std::vector<std::vector<std::string>> points = {{}};
  for (const auto& [key, values] : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& p : points)
      for (const std::string& v : values) {
        next.push_back(p);
        next.back().push_back(key + "=" + v);
      }
    points = std::move(next);
  }
  return points;
}

void add_grid(SweepPlan& plan, const std::vector<std::pair<std::string, std::vector<std::string>>>& axes) {
  if (axes.empty()) return;
  for (const auto& point : grid_points(axes)) plan.variants.push_back(make_variant(grid_label(point), point));
}

std::vector<int64_t> parse_seeds(const std::string& text, const std::string& where) {
  std::vector<int64_t> out;
  for (const std::string& s : split_commas(text)) {
    KILN_CHECK(!s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), ::isdigit), where, ": seed '", s,
               "' is not accepted; accepted: whole numbers >= 0 separated by commas (seeds=0,1,2)");
    out.push_back(std::stoll(s));
  }
  return out;
}

// The sweep folder: <train.runs_dir of the base>/<name>.
std::string sweep_dir(const json& base, const std::string& name) {
  const json train = base.value("train", json::object());
  const std::string runs = train.is_object() && train.contains("runs_dir") && train["runs_dir"].is_string()
                               ? train["runs_dir"].get<std::string>()
                               : TrainOptions().runs_dir;
  return (fs::path(runs) / name).string();
}

void check_name(const std::string& name, const std::string& where) {
  KILN_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..", where,
             ": the sweep's name '", name, "' is not accepted; accepted: a folder name (letters, digits, '.', '-', '_')");
}

Placement read_placement(const json& devices, const json& parallel, const std::string& where) {
  Placement p;
  if (devices.is_string() || devices.is_number_integer()) {
    for (const std::string& d : split_commas(value_text(devices)))
      if (!d.empty()) p.devices.push_back(d);
  } else if (devices.is_array()) {
    for (const json& d : devices) p.devices.push_back(value_text(d));
  } else {
    KILN_CHECK(devices.is_null(), where, ".devices must be a device list (\"0,1,2,3\" or [0, 1]), not ",
               json_type_name(devices));
  }
  if (!parallel.is_null() && parallel != "auto") {
    KILN_CHECK(parallel.is_number_integer() && parallel.get<int64_t>() >= 1 && parallel.get<int64_t>() <= 256, where,
               ".parallel = ", parallel.dump(), " is not accepted; accepted: \"auto\" or a whole number 1..256 (runs at a time)");
    p.parallel = parallel.get<int64_t>();
  }
  return p;
}

}  // namespace

std::string grid_label(const std::vector<std::string>& overrides) {
  std::string label;
  for (const std::string& o : overrides) {
    const std::optional<KeyValue> kv = split_key_value(o);
    if (!kv) continue;
    std::string key = expand_short_form(kv->key);
    key = key.substr(key.find_last_of('.') == std::string::npos ? 0 : key.find_last_of('.') + 1);
    label += (label.empty() ? "" : "_") + key + kv->value;
  }
  for (char& c : label)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  return label.empty() ? "base" : label;
}

std::vector<PlannedRun> planned_runs(const SweepPlan& plan) {
  std::vector<PlannedRun> out;
  for (int64_t seed : plan.seeds)
    for (size_t v = 0; v < plan.variants.size(); ++v)
      out.push_back(PlannedRun{plan.variants[v].label + "-s" + std::to_string(seed), v, seed});
  return out;
}

json run_config(const SweepPlan& plan, const PlannedRun& run) {
  json c = plan.base;
  apply_overrides(c, plan.variants.at(run.variant).overrides);
  if (!c.contains("train") || !c["train"].is_object()) c["train"] = json::object();
  c["train"]["seed"] = run.seed;
  c["train"]["runs_dir"] = plan.dir;
  c["name"] = run.name;
  return c;
}

SweepPlan plan_from_command_line(const std::string& config_file, const std::vector<std::string>& args,
                                 Placement* placement) {
  SweepPlan plan;
  plan.base = load_config_file(config_file);
  std::vector<std::string> overrides;
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  json devices, parallel;
  std::string name, seeds;
  for (const std::string& a : args) {
    const std::optional<KeyValue> kv = split_key_value(a);
    KILN_CHECK(kv, "kiln sweep: argument '", a, "' is not key=value; accepted: key=v1,v2,... (a grid axis), seeds=0,1,2, "
               "name=NAME, devices=0,1, parallel=N, or any config key=value");
    const std::string key = expand_short_form(kv->key);
    if (kv->key == "seeds") seeds = kv->value;
    else if (kv->key == "name" || key == "name") name = kv->value;
    else if (kv->key == "devices") devices = kv->value;
    else if (kv->key == "parallel") parallel = kv->value == "auto" ? json("auto") : parse_config_text(kv->value, "argument '" + a + "'");
    else if (key != "train.device" && kv->value.find(',') != std::string::npos && kv->value[0] != '[' &&
             kv->value[0] != '{' && kv->value[0] != '"') {
      std::vector<std::string> values = split_commas(kv->value);
      KILN_CHECK(std::none_of(values.begin(), values.end(), [](const std::string& v) { return v.empty(); }),
                 "kiln sweep: argument '", a, "': a grid axis takes values separated by commas, none of them empty");
      axes.emplace_back(kv->key, values);
    } else {
      overrides.push_back(a);
    }
  }
  apply_overrides(plan.base, overrides);
  add_grid(plan, axes);
  if (plan.variants.empty()) plan.variants.push_back(make_variant("base", {}));
  plan.seeds = seeds.empty() ? std::vector<int64_t>{0} : parse_seeds(seeds, "kiln sweep: seeds=" + seeds);
  if (name.empty()) name = plan.base.value("name", fs::path(config_file).stem().string()) + "-sweep";
  check_name(name, "kiln sweep: name=" + name);
  plan.name = name;
  plan.dir = sweep_dir(plan.base, name);
  if (placement) *placement = read_placement(devices, parallel, "kiln sweep: argument");
  return plan;
}

bool is_sweep_file(const std::string& path) {
  if (!fs::is_regular_file(path)) return false;
  try {
    const json j = load_config_file(path);
    return j.is_object() && (j.contains("base") || j.contains("grid") || j.contains("variants"));  // a config has none
  } catch (const Error&) {
    return false;
  }
}

namespace {

// {key: value} of a sweep file as key=value overrides, in the file's order.
std::vector<std::string> set_overrides(const json& set, const std::string& path) {
  std::vector<std::string> out;
  if (set.is_null()) return out;
  KILN_CHECK(set.is_object(), path, " must be an object {\"key\": value, ...}, not ", json_type_name(set));
  for (const auto& [k, v] : set.items()) out.push_back(k + "=" + value_text(v));
  return out;
}

Expected read_expected(const json& e, const std::string& path) {
  JsonReader r(e, path);
  Expected x;
  r.require("top1", x.top1);
  KILN_CHECK(x.top1 >= 0 && x.top1 <= 100, path, ".top1 = ", x.top1, " is out of range; accepted: 0..100 (percent)");
  r.require("source", x.source);
  r.finish();
  return x;
}

}  // namespace

namespace {

SweepPlan read_sweep_file(const json& j, const std::string& file, Placement* placement) {
  const std::string where = "sweep file '" + file + "'";
  JsonReader r(j, "");
  SweepPlan plan;
  const fs::path folder = fs::path(file).parent_path();
  const json base = r.raw("base");
  KILN_CHECK(base.is_string() || base.is_object(), where, ": base must be a config file's path or a config object, not ",
             json_type_name(base));
  plan.base = base.is_string() ? load_config_file((folder / base.get<std::string>()).string()) : base;
  apply_overrides(plan.base, set_overrides(r.raw("set"), "set"));
  const json grid = r.raw("grid");
  if (!grid.is_null()) {
    KILN_CHECK(grid.is_object() && !grid.empty(), where, ": grid is empty; accepted: {\"key\": [value, ...], ...} with at "
               "least one key (or leave grid out and list variants)");
    std::vector<std::pair<std::string, std::vector<std::string>>> axes;
    for (const auto& [k, values] : grid.items()) {
      KILN_CHECK(values.is_array() && !values.empty(), where, ": grid.", k, " must be a non-empty list of values, not ",
                 values.is_array() ? "an empty list" : json_type_name(values));
      axes.emplace_back(k, std::vector<std::string>());
      for (const json& v : values) axes.back().second.push_back(value_text(v));
    }
    add_grid(plan, axes);
  }
  const json variants = r.raw("variants");
  KILN_CHECK(variants.is_null() || (variants.is_array() && !variants.empty()), where,
             ": variants must be a non-empty list of {\"label\", \"set\", \"expected\"}");
  for (size_t i = 0; variants.is_array() && i < variants.size(); ++i) {
    const std::string path = json_path("variants", i);
    JsonReader vr(variants[i], path);
    Variant v;
    vr.require("label", v.label);
    v.overrides = set_overrides(vr.raw("set"), json_path(path, "set"));
    if (const json e = vr.raw("expected"); !e.is_null()) {
      v.has_expected = true;
      v.expected = read_expected(e, json_path(path, "expected"));
    }
    vr.finish();
    plan.variants.push_back(v);
  }
  const json expected = r.raw("expected");
  KILN_CHECK(expected.is_null() || expected.is_object(), where, ": expected must be {\"<variant label>\": {\"top1\", \"source\"}}");
  const json no_expected = json::object();
  for (const auto& [label, e] : (expected.is_object() ? expected : no_expected).items()) {
    const std::string& name = label;  // a lambda may not capture a structured binding (C++20 allows it; clang 14 does not)
    auto it = std::find_if(plan.variants.begin(), plan.variants.end(), [&](const Variant& v) { return v.label == name; });
    std::vector<std::string> labels;
    for (const Variant& v : plan.variants) labels.push_back(v.label);
    KILN_CHECK(it != plan.variants.end(), where, ": expected.", label, ": no variant is labelled '", label, "'; variants: ",
               join(labels));
    it->has_expected = true;
    it->expected = read_expected(e, "expected." + label);
  }
  if (plan.variants.empty()) plan.variants.push_back(make_variant("base", {}));  // the base config over the seeds
  const json seeds = r.raw("seeds");
  if (seeds.is_null()) plan.seeds = {0};
  else {
    KILN_CHECK(seeds.is_array() && !seeds.empty(), where, ": seeds must be a non-empty list of whole numbers");
    for (const json& s : seeds) {
      KILN_CHECK(s.is_number_integer() && s.get<int64_t>() >= 0, where, ": seed ", s.dump(),
                 " is not accepted; accepted: whole numbers >= 0");
      plan.seeds.push_back(s.get<int64_t>());
    }
  }
  const Placement p = read_placement(r.raw("devices"), r.raw("parallel"), where);
  if (placement) *placement = p;
  plan.name = r.get("name", fs::path(file).stem().string());
  check_name(plan.name, where);
  r.finish();
  plan.dir = sweep_dir(plan.base, plan.name);
  return plan;
}

}  // namespace

SweepPlan plan_from_file(const std::string& file, Placement* placement) {
  const json j = load_config_file(file);
  try {
    return read_sweep_file(j, file, placement);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind("sweep file", 0) == 0 || what.rfind("config file", 0) == 0) throw;
    KILN_FAIL("sweep file '", file, "': ", what);
  }
}

void validate_plan(SweepPlan& plan, const Validate& validate) {
  KILN_CHECK(!plan.variants.empty(), "kiln sweep ", plan.name, ": the plan has no variants");
  KILN_CHECK(!plan.seeds.empty(), "kiln sweep ", plan.name, ": the plan has no seeds");
  std::set<int64_t> seeds;
  for (int64_t s : plan.seeds) {
    KILN_CHECK(s >= 0, "kiln sweep ", plan.name, ": seed ", s, " is not accepted; accepted: whole numbers >= 0");
    KILN_CHECK(seeds.insert(s).second, "kiln sweep ", plan.name, ": seed ", s, " is listed twice");
  }
  std::map<std::string, std::string> labels, sets;
  for (const Variant& v : plan.variants) {
    const std::string set = join(canonical(v.overrides), " ");
    KILN_CHECK(labels.emplace(v.label, set).second, "kiln sweep ", plan.name, ": two variants are labelled '", v.label,
               "'; each variant needs its own label");
    KILN_CHECK(sets.emplace(set, v.label).second, "kiln sweep ", plan.name, ": variants '", sets[set], "' and '", v.label,
               "' are the same (", set.empty() ? "the base config" : set, "); each variant must differ");
  }
  for (size_t i = 0; i < plan.variants.size(); ++i) {
    Variant& v = plan.variants[i];
    try {
      v.params = validate(run_config(plan, PlannedRun{v.label + "-s" + std::to_string(plan.seeds[0]), i, plan.seeds[0]}));
    } catch (const std::exception& e) {
      KILN_FAIL("kiln sweep ", plan.name, ": variant '", v.label, "' (",
                v.overrides.empty() ? std::string("the base config") : join(v.overrides, " "), "): ", e.what(),
                "; nothing has run");
    }
  }
}

json plan_to_json(const SweepPlan& plan) {
  json variants = json::array();
  for (const Variant& v : plan.variants) {
    json jv = {{"label", v.label}, {"overrides", v.overrides}, {"params", v.params}};
    if (v.has_expected) jv["expected"] = {{"top1", v.expected.top1}, {"source", v.expected.source}};
    variants.push_back(jv);
  }
  json runs = json::array();
  for (const PlannedRun& r : planned_runs(plan))
    runs.push_back({{"run", r.name}, {"variant", plan.variants[r.variant].label}, {"seed", r.seed}});
  return {{"name", plan.name}, {"base", plan.base}, {"variants", variants}, {"seeds", plan.seeds}, {"runs", runs}};
}

SweepPlan plan_from_json(const json& j, const std::string& source) {
  try {
    SweepPlan plan;
    plan.name = j.at("name").get<std::string>();
    plan.base = j.at("base");
    for (const json& jv : j.at("variants")) {
      Variant v = make_variant(jv.at("label").get<std::string>(), jv.at("overrides").get<std::vector<std::string>>());
      v.params = jv.value("params", int64_t{0});
      if (jv.contains("expected")) {
        v.has_expected = true;
        v.expected = Expected{jv["expected"].at("top1").get<double>(), jv["expected"].at("source").get<std::string>()};
      }
      plan.variants.push_back(v);
    }
    plan.seeds = j.at("seeds").get<std::vector<int64_t>>();
    return plan;
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL(source, " is not a sweep plan kiln can read (", e.what(), "); it was not written by this kiln sweep");
  }
}

std::vector<std::string> plan_changes(const SweepPlan& before, const SweepPlan& after) {
  std::vector<std::string> out;
  if (before.name != after.name) out.push_back("name: " + before.name + " -> " + after.name);
  for (const auto& [key, change] : changed_keys(before.base, after.base))
    out.push_back("base config: " + key + ": " + change.first.dump() + " -> " + change.second.dump());
  for (const Variant& v : before.variants) {
    auto it = std::find_if(after.variants.begin(), after.variants.end(), [&](const Variant& a) { return a.label == v.label; });
    if (it == after.variants.end()) out.push_back("variant '" + v.label + "' is missing");
    else if (canonical(it->overrides) != canonical(v.overrides))
      out.push_back("variant '" + v.label + "': " + join(v.overrides, " ") + " -> " + join(it->overrides, " "));
  }
  for (int64_t s : before.seeds)
    if (std::find(after.seeds.begin(), after.seeds.end(), s) == after.seeds.end())
      out.push_back("seed " + std::to_string(s) + " is missing");
  return out;
}

}  // namespace kiln::sweep
