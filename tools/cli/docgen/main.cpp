// kiln_docgen: the build step that extracts the meaning of each config key from the `///` comments of
// the options structs' fields, for the config schema (tools/cli/config_schema.h: `kiln train --help`,
// `kiln config keys`, docs/training.md's key table).
//
//   kiln_docgen OUT.cpp SOURCE_ROOT HEADER...
//
// writes OUT.cpp defining kiln::cli::field_docs() and struct_bases(): per struct, each field's
// comment (preceding `///` lines, or a trailing `/// ...` plus the `///` lines that continue it) joined
// into one line, and the base of each struct. Only fields written directly in a struct's body count;
// a member that is not a config key uses `//`. Run by CMake (tools/cli/CMakeLists.txt) whenever a
// header changes. Tests: tests/cli/config_schema_test.cpp (every key has a meaning, every meaning a key).
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct FieldDoc {
  std::string type, field, doc, file;
};
struct Base {
  std::string type, base;
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// The code of a line without its comment ("//" outside a string literal) and string literals blanked, for
// counting braces; `comment` receives what follows "///" when the comment is a doc comment.
std::string code_of(const std::string& line, std::string* doc, bool* has_doc) {
  std::string code;
  bool in_str = false, in_chr = false;
  *has_doc = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_str || in_chr) {
      if (c == '\\') ++i;
      else if ((in_str && c == '"') || (in_chr && c == '\'')) in_str = in_chr = false;
      code += ' ';
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '\'') in_chr = true;
    if (c == '/' && i + 1 < line.size() && line[i + 1] == '/') {
      if (i + 2 < line.size() && line[i + 2] == '/') {
        *has_doc = true;
        *doc = trim(line.substr(i + 3));
      }
      break;
    }
    code += (in_str || in_chr) ? ' ' : c;
  }
  return code;
}

// The names a member declaration declares ("std::string a, b = x;" -> a, b); none when it is not a data
// member (a function, a type, an access label, ...).
std::vector<std::string> field_names(const std::string& code_in) {
  const std::string code = trim(code_in);
  static const std::regex skip(R"(^(static|using|friend|return|typedef|template|struct|class|enum|public|private|protected|#)\b)");
  if (code.empty() || code.back() != ';' || std::regex_search(code, skip)) return {};
  // The declarator part: up to the first top-level '=' or '{' (an initialiser) or the ';'.
  std::string decl;
  int angle = 0;
  for (char c : code) {
    if (c == '<') ++angle;
    if (c == '>') --angle;
    if (angle == 0 && (c == '=' || c == '{' || c == ';')) break;
    if (c == '(') return {};  // a function
    decl += angle == 0 && c == ',' ? '\x01' : c;
  }
  std::vector<std::string> parts;
  std::stringstream ss(decl);
  std::string part;
  while (std::getline(ss, part, '\x01')) parts.push_back(trim(part));
  std::vector<std::string> names;
  static const std::regex last_ident(R"(([A-Za-z_]\w*)\s*$)");
  for (size_t i = 0; i < parts.size(); ++i) {
    std::smatch m;
    if (!std::regex_search(parts[i], m, last_ident)) return {};
    if (i == 0 && trim(parts[i]) == m[1].str()) return {};  // no type before the name
    names.push_back(m[1]);
  }
  return names;
}

void scan(const std::string& path, const std::string& rel, std::vector<FieldDoc>& docs, std::vector<Base>& bases) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("kiln_docgen: cannot read " + path);
  static const std::regex struct_open(R"(^\s*struct\s+(\w+)\s*(:\s*(public\s+)?([\w:]+))?\s*\{)");
  struct Open {
    std::string name;
    int depth;  // brace depth inside its body
  };
  std::vector<Open> structs;
  int depth = 0;
  std::vector<std::string> pending;   // pure `///` lines not yet attached
  long last_trailing_index = -1;      // the previous member, when it carried a trailing doc
  std::string line;
  while (std::getline(in, line)) {
    std::string doc;
    bool has_doc = false;
    const std::string code = code_of(line, &doc, &has_doc);
    const bool pure_comment = trim(code).empty();
    if (pure_comment && has_doc) {
      pending.push_back(doc);
      continue;
    }
    if (pure_comment) {  // blank or `//`: pending lines continue the previous member's trailing doc, if any
      if (last_trailing_index >= 0)
        for (const std::string& p : pending) docs[last_trailing_index].doc += " " + p;
      pending.clear();
      last_trailing_index = -1;
      continue;
    }
    std::smatch m;
    const bool in_body = !structs.empty() && depth == structs.back().depth;
    std::vector<std::string> names = in_body ? field_names(code) : std::vector<std::string>{};
    if (!names.empty()) {
      if (has_doc && last_trailing_index >= 0)
        for (const std::string& p : pending) docs[last_trailing_index].doc += " " + p;
      std::string text;
      if (has_doc) text = doc;
      else
        for (const std::string& p : pending) text += (text.empty() ? "" : " ") + p;
      pending.clear();
      last_trailing_index = -1;
      if (!text.empty()) {
        for (const std::string& n : names) docs.push_back({structs.back().name, n, text, rel});
        if (has_doc) last_trailing_index = static_cast<long>(docs.size()) - 1;
      }
    } else {
      pending.clear();
      last_trailing_index = -1;
    }
    if (std::regex_search(line, m, struct_open)) {
      if (m[4].matched) bases.push_back({m[1], m[4]});
      structs.push_back({m[1], depth + 1});
    }
    for (char c : code) {
      if (c == '{') ++depth;
      if (c == '}') {
        --depth;
        if (!structs.empty() && depth < structs.back().depth) structs.pop_back();
      }
    }
  }
}

std::string collapse(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ' ' && !out.empty() && out.back() == ' ') continue;
    out += c;
  }
  return trim(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: kiln_docgen OUT.cpp SOURCE_ROOT HEADER...\n";
    return 2;
  }
  try {
    std::vector<FieldDoc> docs;
    std::vector<Base> bases;
    const std::string root = std::string(argv[2]) + "/";
    for (int i = 3; i < argc; ++i) {
      std::string p = argv[i];
      scan(p, p.rfind(root, 0) == 0 ? p.substr(root.size()) : p, docs, bases);
    }
    std::ostringstream out;
    out << "// Generated by kiln_docgen (tools/cli/docgen/main.cpp) from the `///` comments of the headers; do not edit.\n"
           "#include \"tools/cli/config_schema.h\"\n\nnamespace kiln::cli {\n\n"
           "const std::vector<FieldDoc>& field_docs() {\n  static const std::vector<FieldDoc> d = {\n";
    for (const FieldDoc& f : docs)
      out << "      {\"" << f.type << "\", \"" << f.field << "\", R\"kiln_doc(" << collapse(f.doc) << ")kiln_doc\", \""
          << f.file << "\"},\n";
    out << "  };\n  return d;\n}\n\nconst std::vector<std::pair<std::string, std::string>>& struct_bases() {\n"
           "  static const std::vector<std::pair<std::string, std::string>> b = {\n";
    for (const Base& b : bases) out << "      {\"" << b.type << "\", \"" << b.base << "\"},\n";
    out << "  };\n  return b;\n}\n\n}  // namespace kiln::cli\n";
    // Rewritten only when it changes, so that a header edit that leaves the docs alone rebuilds nothing.
    std::ifstream old(argv[1]);
    std::stringstream prev;
    prev << old.rdbuf();
    if (prev.str() != out.str()) std::ofstream(argv[1]) << out.str();
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
