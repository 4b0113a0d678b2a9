#include "tools/config.h"

#include <fstream>
#include <sstream>

namespace kiln {

namespace {
const std::vector<std::pair<std::string, std::string>> kShortForms = {
    {"epochs", "train.epochs"},     {"batch", "data.batch_size"},       {"device", "train.device"},
    {"lr", "optim.lr"},             {"precision", "train.precision"}, {"workers", "data.workers"},
    {"seed", "train.seed"},         {"resume", "train.resume"},     {"name", "name"},
    {"checkpoint", "train.checkpoint"}, {"weights", "weights"},     {"model", "model.name"},
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool is_index(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}
}  // namespace

std::string expand_short_form(const std::string& key) {
  for (const auto& [k, v] : kShortForms)
    if (k == key) return v;
  return key;
}

json load_config_file(const std::string& path) {
  std::ifstream f(path);
  KILN_CHECK(f.good(), "config file '", path, "' cannot be read (does it exist?)");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    json j = json::parse(ss.str(), nullptr, true, /*ignore_comments=*/true);
    KILN_CHECK(j.is_object(), "config file '", path, "' must hold a JSON object, not ", json_type_name(j));
    return j;
  } catch (const json::parse_error& e) {
    KILN_FAIL("config file '", path, "' is not valid JSON: ", e.what());
  } catch (const json::out_of_range& e) {  // a number beyond double's range, e.g. 1e400
    KILN_FAIL("config file '", path, "' holds a number out of range: ", e.what());
  }
}

void apply_overrides(json& config, const std::vector<std::string>& overrides) {
  for (const std::string& arg : overrides) {
    auto eq = arg.find('=');
    KILN_CHECK(eq != std::string::npos && eq > 0, "argument '", arg,
               "' is not key=value; e.g. epochs=3, batch=-1, device=0,1, optim.lr=0.05");
    try {  // the config is written back as JSON (config.json, messages): only UTF-8 text fits
      (void)json(arg).dump();
    } catch (const json::type_error&) {
      KILN_FAIL("argument '", arg, "' is not valid UTF-8 text");
    }
    std::string key = expand_short_form(arg.substr(0, eq));
    std::string text = arg.substr(eq + 1);
    json value;
    try {
      value = json::parse(text);
    } catch (const json::parse_error&) {
      value = text;  // plain strings need no quotes: device=0,1, resume=runs/x/last
    } catch (const json::out_of_range&) {
      KILN_FAIL("argument '", arg, "': the number ", text, " is out of range (beyond +-1.8e308)");
    }
    std::vector<std::string> parts = split(key, '.');
    json* node = &config;
    std::string path;
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string& p = parts[i];
      KILN_CHECK(!p.empty(), "argument '", arg, "': empty component in key '", key, "'");
      bool last = i + 1 == parts.size();
      if (node->is_array()) {
        KILN_CHECK(is_index(p), "argument '", arg, "': ", path, " is an array; index it with a number, not '", p, "'");
        size_t idx = std::stoul(p);
        KILN_CHECK(idx < node->size(), "argument '", arg, "': ", path, " has ", node->size(), " entries, no index ", idx);
        node = &(*node)[idx];
      } else {
        KILN_CHECK(node->is_object() || node->is_null(), "argument '", arg, "': ", path, " holds ",
                   json_type_name(*node), ", not an object");
        node = &(*node)[p];
      }
      path += (path.empty() ? "" : ".") + p;
      if (last) *node = value;
    }
  }
}

}  // namespace kiln
