#!/usr/bin/env bash
# The sanitizer check (docs/testing.md), run by CI after the README's test command:
#   1. builds kiln with clang, ASan + UBSan and libFuzzer (-DKILN_FUZZ=ON), CPU-only, into build-asan/;
#   2. runs the test suite under the sanitizers, without the `slow` label and the MPI tests (Mpi.*),
#      which take too long there (the normal build runs them);
#   3. runs every libFuzzer target of fuzz/ for FUZZ_SECONDS (default 30) on its seed corpus
#      fuzz/corpus/<target>/; new inputs go to build-asan/fuzz-corpus/<target>/, crashes to
#      build-asan/fuzz-crashes/.
# Any sanitizer report, failed test or fuzz crash fails the script. FUZZ_SECONDS=0 skips step 3.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
jobs=$(nproc)
launcher=()
if [ "${KILN_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then  # as tools/build.sh: one cache for every clone
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
fi

t0=$(date +%s)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
  -DCMAKE_CXX_COMPILER=clang++ -DKILN_CUDA=OFF -DKILN_FUZZ=ON "${launcher[@]}" >/dev/null
cmake --build build-asan -j "$jobs"
t1=$(date +%s)
echo "kiln sanitize: build took $((t1 - t0)) s"

# Leaks inside third-party libraries (OpenMP's thread pools, OpenCV's codec state) are suppressed by
# fuzz/lsan.supp; kiln's own code has no suppression.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0}
ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE slow -E '^Mpi\.'
t2=$(date +%s)
echo "kiln sanitize: tests took $((t2 - t1)) s"

if [ "$FUZZ_SECONDS" -gt 0 ]; then
  mkdir -p build-asan/fuzz-crashes
  for src in fuzz/*.cpp; do
    t=$(basename "$src" .cpp)
    mkdir -p "build-asan/fuzz-corpus/$t"
    echo "kiln sanitize: fuzzing $t for $FUZZ_SECONDS s"
    log="build-asan/fuzz-crashes/$t.log"
    rc=0
    "build-asan/fuzz/kiln_fuzz_$t" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 \
      -artifact_prefix="build-asan/fuzz-crashes/$t-" "build-asan/fuzz-corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
      tail -n 80 "$log"
      echo "kiln sanitize: fuzz target $t failed (exit $rc; the input is in build-asan/fuzz-crashes/, log $log)"
      exit 1
    fi
    grep -E "^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units" "$log" || true
  done
  echo "kiln sanitize: fuzzing took $(($(date +%s) - t2)) s"
fi
echo "kiln sanitize: all clean"
