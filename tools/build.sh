#!/usr/bin/env bash
# Configures and builds kiln (Release) into build/.
#   tools/build.sh                 everything: the kiln command, the libraries, tests, benches, examples
#   tools/build.sh kiln            only what the named targets need (the quick start's first command)
# Arguments that start with -D (or -G/-U) go to cmake, e.g. -DKILN_CUDA=OFF; the others are targets.
# A compiler cache is used when one is installed (ccache; KILN_CCACHE=0 turns it off): a rebuild from a
# fresh clone of the same sources then compiles nothing again (README, Quick start).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake_args=() targets=()
for a in "$@"; do
  case "$a" in
    -D*|-U*|-G*) cmake_args+=("$a") ;;
    *) targets+=("--target" "$a") ;;
  esac
done
if [ "${KILN_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  # One cache for every clone: paths under the clone are hashed relative to it.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >/dev/null
cmake --build build -j "$(nproc)" "${targets[@]}"
