// Config files and key=value overrides (see config.h). Tests: tests/engine/config_test.cpp.
#include "tools/deploy/config.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace kiln {

namespace {
// Short forms of the command line. `text`: the key takes a string, so the value is kept as typed
// even where it would parse as JSON (device=0, device=[0,1], name=2024, resume=7).
struct ShortForm {
  const char* key;
  const char* path;
  bool text;
};
const ShortForm kShortForms[] = {
    {"epochs", "train.epochs", false},   {"batch", "data.batch_size", false},   {"device", "train.device", true},
    {"lr", "optim.lr", false},           {"precision", "train.precision", true}, {"workers", "data.workers", false},
    {"seed", "train.seed", false},       {"resume", "train.resume", true},       {"name", "name", true},
    {"checkpoint", "train.checkpoint", true}, {"weights", "weights", true},     {"model", "model.name", true},
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

// Builds the document from nlohmann's SAX events, refusing on the way what json::parse() accepts
// silently: a key given twice in one object (the last used to win), nesting deeper than
// kMaxConfigDepth, lists longer than kMaxConfigListLength (no config key takes one; a 5 MB list cost
// over 1 GB), and numbers beyond a double (1e400), each error naming the JSON path and `source_`.
class StrictBuilder : public nlohmann::json_sax<json> {
 public:
  explicit StrictBuilder(std::string source) : source_(std::move(source)) {}
  json result;
  bool syntax_error = false;
  std::string syntax_message;

  bool null() override { return add(json(nullptr)); }
  bool boolean(bool v) override { return add(json(v)); }
  bool number_integer(number_integer_t v) override { return add(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return add(json(v)); }
  bool string(string_t& v) override { return add(json(std::move(v))); }
  bool binary(binary_t&) override { KILN_FAIL(source_, ": binary values are not JSON"); }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    KILN_CHECK(!f.node->contains(k), source_, ": duplicate key ", json_path(f.path, k),
               " (a key may appear once in an object; the later value used to win silently)");
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string& token, const nlohmann::detail::exception& e) override {
    // 406: a number beyond a double (1e400). A range error, not a syntax error: name where it is.
    const std::string where = next_path();
    KILN_CHECK(e.id != 406, source_, ": ", where.empty() ? "" : where + " = ", token,
               " is out of range; accepted: finite numbers (magnitude below 1.8e308)");
    syntax_error = true;
    syntax_message = e.what();
    return false;
  }

 private:
  struct Frame {
    json* node;
    std::string path;
  };
  // The path of the value about to be added ("" for the root).
  std::string next_path() const {
    if (stack_.empty()) return "";
    const Frame& f = stack_.back();
    return f.node->is_array() ? json_path(f.path, f.node->size()) : json_path(f.path, key_);
  }
  json* place(json&& v) {
    if (stack_.empty()) {
      result = std::move(v);
      return &result;
    }
    json* parent = stack_.back().node;
    if (parent->is_array()) {
      KILN_CHECK(parent->size() < kMaxConfigListLength, source_, ": ", stack_.back().path.empty() ? "the list" : stack_.back().path,
                 " has more than ", kMaxConfigListLength, " entries; no config key takes a list that long");
      parent->push_back(std::move(v));
      return &parent->back();
    }
    json& slot = (*parent)[key_];
    slot = std::move(v);
    return &slot;
  }
  bool add(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& v) {
    std::string path = next_path();
    KILN_CHECK(stack_.size() < kMaxConfigDepth, source_, ": ", path, " is nested more than ", kMaxConfigDepth,
               " levels deep; configs nest a few levels");
    json* node = place(std::move(v));  // stays valid: its parent grows only after it is closed
    stack_.push_back({node, std::move(path)});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  std::string source_;
  std::vector<Frame> stack_;
  std::string key_;
};
}  // namespace

json parse_config_text(const std::string& text, const std::string& source, bool* syntax_error) {
  StrictBuilder b(source);
  json::sax_parse(text, &b, nlohmann::json::input_format_t::json, /*strict=*/true, /*ignore_comments=*/true);
  if (b.syntax_error) {
    if (syntax_error) {
      *syntax_error = true;
      return nullptr;
    }
    KILN_FAIL(source, " is not valid JSON: ", b.syntax_message);
  }
  if (syntax_error) *syntax_error = false;
  return std::move(b.result);
}

std::string expand_short_form(const std::string& key) {
  for (const ShortForm& s : kShortForms)
    if (key == s.key) return s.path;
  return key;
}

json load_config_file(const std::string& path) {
  std::ifstream f(path);
  KILN_CHECK(f.good(), "config file '", path, "' cannot be read (does it exist?)");
  std::stringstream ss;
  ss << f.rdbuf();
  json j = parse_config_text(ss.str(), "config file '" + path + "'");
  KILN_CHECK(j.is_object(), "config file '", path, "' must hold a JSON object, not ", json_type_name(j));
  return j;
}

std::optional<KeyValue> split_key_value(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) return std::nullopt;
  return KeyValue{arg.substr(0, eq), arg.substr(eq + 1)};
}

std::string dashed_argument_problem(const std::string& arg) {
  const size_t dashes = arg.find_first_not_of('-');
  if (dashes == 0 || dashes == std::string::npos || !std::isalpha(static_cast<unsigned char>(arg[dashes]))) return "";
  const std::string bare = arg.substr(dashes);
  const std::string head = "argument '" + arg + "': ";
  if (bare == "help" || bare == "h")
    return head + "help goes right after the command (kiln <command> --help); the arguments after it are "
                  "key=value without dashes";
  if (bare.find('=') == std::string::npos)
    return head + "kiln takes key=value without dashes: " + bare + "=VALUE (e.g. epochs=3)";
  return head + "did you mean " + bare + "? kiln takes key=value without dashes";
}

namespace {
// A key without a dot that is not a short form but close to one ("epohcs"): refused, naming the short form
// and its path. Any other key is left to the section readers (an unknown top-level key, a misspelt dotted one).
void check_short_form(const std::string& arg, const std::string& key) {
  if (key.find('.') != std::string::npos) return;
  std::vector<std::string> shorts;
  for (const ShortForm& s : kShortForms) {
    if (key == s.key) return;
    shorts.emplace_back(s.key);
  }
  const std::string near = closest_match(key, shorts);
  if (near.empty()) return;
  const std::string path = expand_short_form(near);
  KILN_FAIL("argument '", arg, "': unknown key ", key, " (did you mean ", near, path == near ? "" : " (" + path + ")",
            "?); short forms: ", join(shorts), "; any other key by its dotted path, e.g. train.epochs=3");
}
}  // namespace

void apply_overrides(json& config, const std::vector<std::string>& overrides) {
  for (const std::string& arg : overrides) {
    const std::string dashed = dashed_argument_problem(arg);
    KILN_CHECK(dashed.empty(), dashed);
    const std::optional<KeyValue> kv = split_key_value(arg);
    KILN_CHECK(kv.has_value(), "argument '", arg, "' is not key=value; e.g. epochs=3, batch=-1, device=0,1, optim.lr=0.05");
    try {  // the config is written back as JSON (config.json, messages): only UTF-8 text fits
      (void)json(arg).dump();
    } catch (const json::type_error&) {
      KILN_FAIL("argument '", arg, "' is not valid UTF-8 text");
    }
    const std::string& short_key = kv->key;
    check_short_form(arg, short_key);
    std::string key = expand_short_form(short_key);
    // model={...} (an object, e.g. {"layers": [...]}) is the whole model section, not model.name
    if (short_key == "model" && !kv->value.empty() && kv->value.front() == '{') key = "model";
    bool text_key = false;
    for (const ShortForm& s : kShortForms)
      if (short_key == s.key) text_key = s.text;
    std::string text = kv->value;
    std::vector<std::string> parts = split(key, '.');
    json* node = &config;
    std::string path;
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string& p = parts[i];
      KILN_CHECK(!p.empty(), "argument '", arg, "': empty component in key '", key, "'");
      if (node->is_array()) {
        KILN_CHECK(is_index(p), "argument '", arg, "': ", path, " is an array; index it with a number, not '", p, "'");
        KILN_CHECK(p.size() < 10 && std::stoul(p) < node->size(), "argument '", arg, "': ", path, " has ", node->size(),
                   " entries, no index ", p);
        node = &(*node)[std::stoul(p)];
      } else {
        KILN_CHECK(node->is_object() || node->is_null(), "argument '", arg, "': ", path, " holds ",
                   json_type_name(*node), ", not an object");
        node = &(*node)[p];
      }
      path += (path.empty() ? "" : ".") + p;
    }
    // A value is JSON when it parses as JSON (numbers, true/false, [..], {..}, "quoted"), a plain
    // string otherwise (device=0,1, resume=runs/x/last). A key that takes a string (a text short
    // form, or a key the file already holds as a string) keeps what was typed: name=2024 is "2024".
    bool not_json = false;
    json value = parse_config_text(text, "argument '" + arg + "' (" + path + ")", &not_json);
    const bool keep_text = text_key || node->is_string();
    if (not_json || (keep_text && !value.is_string() && !value.is_object())) value = text;
    *node = std::move(value);
  }
}

}  // namespace kiln
