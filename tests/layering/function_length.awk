# Measures every function body of the C++/CUDA files it reads, printing one line per function:
#   FILE:LINE:NAME:LENGTH
# LINE is where the function's header starts, LENGTH the lines from its opening brace to its closing
# brace, both included (a one-line body is 1). A function is a brace block opened at namespace or
# class scope whose header ends in its parameter list (plus const, noexcept, override, final, a
# trailing return type) or in a constructor's initializer list; lambdas and blocks inside a function
# count towards that function. Comments, string and character literals (raw strings included) and
# preprocessor lines are skipped, so braces in them do not count.
# Used by function_length.sh (the 80-line rule), which tests it on fixtures with --self-test.

function reset_header() { hdr = ""; hdr_line = 0 }

# The header without a leading template <...> clause.
function strip_template(h,    i, c, d) {
  if (h !~ /^template[ ]*</) return h
  d = 0
  for (i = index(h, "<"); i <= length(h); i++) {
    c = substr(h, i, 1)
    if (c == "<") d++
    else if (c == ">" && --d == 0) return strip_template(substr(h, i + 1))
  }
  return h
}

# "namespace", "class", "function" or "init" (a brace initializer at namespace or class scope).
function classify(h) {
  h = strip_template(h)
  gsub(/^ +| +$/, "", h)
  if (h ~ /(^|[^A-Za-z0-9_])namespace([^A-Za-z0-9_]|$)/ || h ~ /^extern ""$/) return "namespace"
  if (h ~ /^((typedef|public|private|protected)[ :]*)*(class|struct|union|enum)([^A-Za-z0-9_]|$)/ && h !~ /=/)
    return "class"
  if (h !~ /\(/) return "init"
  if (h ~ /\)[ ]*((const|volatile|noexcept|override|final|mutable|try|&|&&)[ ]*|noexcept[ ]*\([^()]*\)[ ]*|->[^;]*)*$/)
    return "function"
  # a constructor's initializer list, once its last member is initialized (`x{a}` opens that member's braces)
  if (h ~ /\)[ ]*((const|noexcept)[ ]*)*:([^:]|$)/ && h ~ /[)}]$/) return "function"
  return "init"
}

# The function's name: the qualified identifier before its parameter list ("Trainer::run",
# "operator()"), or the variable a lambda at namespace scope is stored in.
function name_of(h,    i, c, d, p, pre) {
  h = strip_template(h)
  if (match(h, /operator[ ]*(\(\)|[^(]+)/)) {
    p = substr(h, RSTART, RLENGTH)
    pre = substr(h, 1, RSTART - 1)
    if (match(pre, /[A-Za-z0-9_:~]+$/)) p = substr(pre, RSTART, RLENGTH) p
    gsub(/ /, "", p)
    return p
  }
  if (match(h, /[A-Za-z0-9_]+[ ]*=[ ]*\[/)) { p = substr(h, RSTART, RLENGTH); sub(/[ ]*=.*/, "", p); return p }
  d = 0
  for (i = 1; i <= length(h); i++) {
    c = substr(h, i, 1)
    if (c == "-" && substr(h, i + 1, 1) == ">") { i++; continue }
    if (c == "<") d++
    else if (c == ">" && d > 0) d--
    else if (c == "(" && d == 0) break
  }
  pre = substr(h, 1, i - 1)
  sub(/[ ]+$/, "", pre)
  if (pre ~ />$/) {  # an explicit specialization, to_double<__half>: the name before its arguments
    d = 0
    for (i = length(pre); i > 0; i--) {
      c = substr(pre, i, 1)
      if (c == ">") d++
      else if (c == "<" && --d == 0) break
    }
    pre = substr(pre, 1, i - 1)
  }
  if (match(pre, /[A-Za-z0-9_:~]+$/)) return substr(pre, RSTART, RLENGTH)
  return "?"
}

# One code character at scope or inside a function.
function code_char(c,    kind, top) {
  top = depth > 0 ? kind_at[depth] : "namespace"
  if (top == "function" || top == "lambda" || top == "block") {
    if (c == "{") kind_at[++depth] = "block"
    else if (c == "}") close_brace()
    return
  }
  if (c == "{") {
    kind = classify(hdr)
    # inside a brace initializer (a registry's table): only a lambda's body is a function
    if (top == "init") kind = kind == "function" && hdr ~ /\][ ]*(\(.*\))?[ ]*(mutable[ ]*)?(->[^{]*)?$/ ? "lambda" : "init"
    kind_at[++depth] = kind
    if (kind == "function" || kind == "lambda") {
      fn_name = kind == "lambda" ? "lambda" : name_of(hdr)
      fn_line = hdr_line && kind == "function" ? hdr_line : FNR  # a lambda: the line of its brace
      fn_open = FNR
      fn_depth = depth
    }
    if (kind != "init") reset_header()
    else hdr = hdr "{"
    return
  }
  if (c == "}") { close_brace(); return }
  if (c == ";") { reset_header(); return }
  if (hdr == "" && c == " ") return
  if (hdr_line == 0) hdr_line = FNR
  hdr = hdr c
}

function close_brace(    kind) {
  if (depth == 0) return  # unbalanced (a brace in a macro): ignored
  kind = kind_at[depth--]
  if ((kind == "function" || kind == "lambda") && depth == fn_depth - 1)
    printf "%s:%d:%s:%d\n", FILENAME, fn_line, fn_name, FNR - fn_open + 1
  if (kind == "init" || kind == "lambda") hdr = hdr "}"
  else if (kind != "block") reset_header()
}

FNR == 1 { depth = 0; in_comment = 0; raw_end = ""; continued = 0; reset_header() }

{
  line = $0
  # Preprocessor lines and their continuations.
  if (continued || (raw_end == "" && !in_comment && line ~ /^[ \t]*#/)) {
    continued = line ~ /\\$/
    next
  }
  gsub(/\t/, " ", line)
  n = length(line)
  for (i = 1; i <= n; i++) {
    c = substr(line, i, 1)
    if (in_comment) {
      if (c == "*" && substr(line, i + 1, 1) == "/") { in_comment = 0; i++ }
      continue
    }
    if (raw_end != "") {
      if (substr(line, i, length(raw_end)) == raw_end) { i += length(raw_end) - 1; raw_end = "" }
      continue
    }
    d = substr(line, i + 1, 1)
    if (c == "/" && d == "/") break
    if (c == "/" && d == "*") { in_comment = 1; i++; continue }
    if (c == "R" && d == "\"" && (i == 1 || substr(line, i - 1, 1) !~ /[A-Za-z0-9_]/ || substr(line, i - 2, 2) ~ /^(u8|[uUL])$/)) {
      p = index(substr(line, i + 2), "(")
      raw_end = ")" substr(line, i + 2, p - 1) "\""
      i += 1 + p
      code_char("\""); code_char("\"")
      continue
    }
    if (c == "\"" || c == "'") {
      # a digit separator (1'000) is no literal
      if (c == "'" && i > 1 && substr(line, i - 1, 1) ~ /[0-9A-Fa-f]/ && d ~ /[0-9A-Fa-f]/) continue
      for (j = i + 1; j <= n; j++) {
        e = substr(line, j, 1)
        if (e == "\\") { j++; continue }
        if (e == c) break
      }
      i = j
      code_char(c); code_char(c)
      continue
    }
    code_char(c)
  }
  code_char(" ")
}
