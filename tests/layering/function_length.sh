#!/usr/bin/env bash
# No product function over 80 lines (../shared/STYLE.md, "Size"; docs/architecture.md): measures every
# function body in the product code (core/ layers/ optim/ data/ models/ tools/: *.cpp *.h *.cu *.cuh)
# with function_length.awk (from its opening brace to its closing brace, both lines included) and
# prints FILE:LINE:FUNCTION: LENGTH lines for each one over the limit, then exits 1.
# An entry "FILE FUNCTION" of the allow-list (long_functions_allowed.txt beside this script) lets that
# function be over the limit until it is split; an entry whose function is no longer over it (or gone)
# is an error too, so the list only shrinks.
# Usage: function_length.sh SOURCE_DIR [ALLOW_FILE]
#        function_length.sh --self-test     (the measurer and this script on fixtures)
# Tests: tests/CMakeLists.txt (Layering.NoProductFunctionOver80Lines, Layering.FunctionLengthSelfTest).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
limit=80

check() {  # check SOURCE_DIR ALLOW_FILE
  local src=$1 allow=$2 bad=0 measured
  measured=$(cd "$src" && find core layers optim data models tools -type f \
               \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort |
               xargs -r awk -f "$here/function_length.awk")
  # "FILE NAME" pairs allowed over the limit (comments and blank lines skipped)
  local -A allowed=() seen=()
  if [ -f "$allow" ]; then
    while read -r file name rest; do
      case $file in '' | '#'*) continue ;; esac
      allowed["$file $name"]=1
    done < "$allow"
  fi
  while IFS= read -r row; do
    [ -n "$row" ] || continue
    local len=${row##*:} rest=${row%:*}
    local file=${rest%%:*} after=${rest#*:}
    local line=${after%%:*} name=${after#*:}
    [ "$len" -gt "$limit" ] || continue
    if [ -n "${allowed["$file $name"]:-}" ]; then
      seen["$file $name"]=1
      echo "function_length: $file:$line:$name: $len lines (allowed over $limit until split: $(basename "$allow"))"
    else
      echo "function_length: $file:$line:$name: $len lines, over $limit; split it into named steps"
      bad=1
    fi
  done <<< "$measured"
  for key in "${!allowed[@]}"; do
    if [ -z "${seen[$key]:-}" ]; then
      echo "function_length: $(basename "$allow") allows '$key', which is not over $limit lines (or not found): remove the entry"
      bad=1
    fi
  done
  [ $bad -eq 0 ] && echo "function_length: no product function over $limit lines but the allowed ones"
  return $bad
}

# The fixtures: braces in comments, strings, characters and raw strings; a multi-line header; a
# constructor whose initializer list has braces; members, operators, lambdas, a registry table.
self_test() {
  local dir
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' RETURN
  mkdir -p "$dir/core"
  cat > "$dir/core/fixture.cpp" <<'EOF'
#include <map>
#define BRACES(x) { if (x) { \
  return; } }
namespace kiln {
namespace {
int one() { return 1; }
}  // namespace
/* a comment { with braces
   over lines } } */
const char* text(int v) {
  const char* a = "{ \" {";  // {
  char c = '{', d = '\'';
  const char* r = R"x( { ) } )x";
  long big = 1'000'000;
  return v ? a : r;
}
struct Point {
  int x{0}, y{0};
  Point(int a, int b) : x{a}, y(b) {
    if (a) {
      y = 2;
    }
  }
  bool operator==(const Point& o) const { return x == o.x; }
};
template <typename T>
T twice(T v,
        T w) {
  auto f = [](T u) {
    return u + u;
  };
  return f(v) + w;
}
const std::map<int, int (*)(int)> kTable = {
    {1, [](int v) {
       return v;
     }},
    {2, nullptr}};
}  // namespace kiln
EOF
  local want got
  want=$(printf "$dir/core/fixture.cpp:%s\n" 6:one:1 10:text:7 19:Point:5 24:operator==:1 26:twice:6 35:lambda:3)
  got=$(awk -f "$here/function_length.awk" "$dir/core/fixture.cpp")
  if [ "$got" != "$want" ]; then
    printf 'function_length self-test: the measurer gave\n%s\nwanted\n%s\n' "$got" "$want"
    return 1
  fi
  # The 80-line rule: 81 lines fail, 80 pass, the allow-list lets one through and must not go stale.
  { echo "void long_one() {"; for _ in $(seq 79); do echo "  f();"; done; echo "}"
    echo "void just_fits() {"; for _ in $(seq 78); do echo "  f();"; done; echo "}"; } > "$dir/core/long.cpp"
  : > "$dir/allow.txt"
  if out=$(check "$dir" "$dir/allow.txt"); then
    echo "function_length self-test: an 81-line function passed: $out"; return 1
  fi
  case $out in *"core/long.cpp:1:long_one: 81 lines, over 80"*) ;; *) echo "self-test: not named: $out"; return 1 ;; esac
  case $out in *just_fits*) echo "self-test: an 80-line function was named: $out"; return 1 ;; esac
  printf '# reason\ncore/long.cpp long_one\n' > "$dir/allow.txt"
  out=$(check "$dir" "$dir/allow.txt") || { echo "self-test: the allowed function still failed: $out"; return 1; }
  echo "core/long.cpp just_fits" >> "$dir/allow.txt"
  if out=$(check "$dir" "$dir/allow.txt"); then
    echo "function_length self-test: a stale allow-list entry passed: $out"; return 1
  fi
  case $out in *"allows 'core/long.cpp just_fits', which is not over 80"*) ;; *) echo "self-test: $out"; return 1 ;; esac
  echo "function_length self-test: the measurer and the rule work on the fixtures"
}

if [ "${1:-}" = --self-test ]; then
  self_test
else
  check "${1:?usage: function_length.sh SOURCE_DIR [ALLOW_FILE] | --self-test}" "${2:-$here/long_functions_allowed.txt}"
fi
