#!/usr/bin/env bash
# The include direction between kiln's libraries (docs/architecture.md), which the linker does not check:
# each library folder includes headers only from the folders it may depend on, and no backend header
# (core/cpu/, core/cuda/) is included outside core/. Prints every offending line and exits 1.
# Usage: layering_test.sh SOURCE_DIR   (tests/CMakeLists.txt, label unit)
set -euo pipefail
cd "$1"
# folder: the include prefixes its files may use (besides the standard and third-party headers)
declare -A allowed=(
  [core]="core"
  [layers]="core layers"
  [models]="core layers models"
  [optim]="core optim"
  [data]="core data"
  [tools/deploy]="core layers models data tools/deploy"
  [tools/engine]="core layers models optim data tools/deploy tools/engine"
  [tools/onnx]="core layers models tools/onnx"
  [tools/sweep]="core layers models optim data tools/deploy tools/engine tools/sweep"
  [tools/cli]="core layers models optim data tools/deploy tools/engine tools/onnx tools/sweep tools/cli"
)
bad=0
for folder in "${!allowed[@]}"; do
  [ -d "$folder" ] || { echo "layering_test: no folder $folder"; bad=1; continue; }
  while IFS= read -r line; do
    inc=${line#*\#include \"}
    inc=${inc%%\"*}
    ok=0
    case $inc in */*) ;; *) ok=1 ;; esac  # a file beside it ("winograd_kernels.h")
    for prefix in ${allowed[$folder]}; do
      case $inc in "$prefix"/*) ok=1 ;; esac
    done
    if [ "$folder" != core ]; then
      case $inc in core/cpu/* | core/cuda/*) ok=0 ;; esac
    fi
    if [ $ok -eq 0 ]; then
      echo "layering_test: $line  (${folder}/ may include: ${allowed[$folder]}; backend headers only inside core/)"
      bad=1
    fi
  done < <(grep -rnE '^\s*#\s*include\s+"' "$folder" --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh')
done
# tools/ root holds scripts and CMakeLists.txt only: every source file is in a library folder.
if compgen -G "tools/*.cpp" >/dev/null || compgen -G "tools/*.h" >/dev/null; then
  echo "layering_test: C++ files at tools/ root: $(ls tools/*.cpp tools/*.h 2>/dev/null | tr '\n' ' ')"
  bad=1
fi
# The umbrella headers (cmake/kiln.h and engine.h: <kiln/kiln.h>, <kiln/engine.h>) are for programs: no
# library file includes them.
if grep -rnE '^\s*#\s*include\s+[<"](kiln/)?(cmake/)?(kiln|engine)\.h[">]' core layers models optim data tools \
     --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh'; then
  echo "layering_test: the lines above include an umbrella header (kiln.h, engine.h), which are for programs only"
  bad=1
fi
[ $bad -eq 0 ] && echo "layering_test: every include follows the library direction"
exit $bad
