#!/usr/bin/env bash
# kiln against libtorch for a hand-written training loop (docs/library.md, "kiln and libtorch"):
# examples/custom_loop.cpp and its libtorch twin tools/bench/libtorch/custom_loop.cpp, each built from
# scratch in a temporary folder and run on Fashion-MNIST. Prints, for each: lines of code (neither
# blank nor comment), the cold compile + link time of the program (no compiler cache; wall and CPU
# seconds), the training steps per second (batch 64) and the test accuracy after those steps, and
# the CPU it ran on. Then the same lines and compile times for the prediction example,
# examples/classify.cpp, and its twin tools/bench/libtorch/classify.cpp (a TorchScript file and
# OpenCV preprocessing by hand; built, not run). A bench script, not a test: the suite never runs it.
#
#   tools/bench/libtorch/compare.sh [STEPS]     training steps each program runs (default 300)
#
# Environment: THREADS (the compute threads of both, OMP_NUM_THREADS, which kiln's oneDNN and OpenMP loops and
# libtorch's intra-op pool both follow; default 1: on a machine shared with other jobs, OpenMP threads
# that wait for each other at every barrier measure the neighbours more than the program), KILN_BUILD (a built kiln to install from, default build/), KILN_TORCH_VENV (PyPI's torch,
# tools/bench/make_torch_venv.sh, default build-torch-venv/), DATA (default /usr/share/datasets/fashion-mnist).
# NOTE: libtorch is compiled with one g++ line, not find_package(Torch): the CMake config of PyPI's CUDA
# wheel runs a GPU detection and then prefers a system libtorch (Debian's 1.13 here) over its own.
set -euo pipefail
src=$(cd "$(dirname "$0")/../../.." && pwd)
steps=${1:-300}
build=${KILN_BUILD:-$src/build}
venv=${KILN_TORCH_VENV:-$src/build-torch-venv}
data=${DATA:-/usr/share/datasets/fashion-mnist}
torch=$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
export OMP_NUM_THREADS=${THREADS:-1}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln_vs_libtorch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Unpacked IDX files: libtorch's MNIST dataset reads no .gz (kiln reads either).
mkdir -p "$tmp/data"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [ -f "$data/$f" ]; then cp "$data/$f" "$tmp/data/"; else gunzip -c "$data/$f.gz" >"$tmp/data/$f"; fi
done

loc() { grep -cvE '^\s*(//.*)?$' "$1"; }  # neither blank nor a // comment line (no /* */ in these files)
# timed LABEL CMD...: runs CMD, records "wall cpu" seconds (CPU: user + system of CMD and its children)
timed() {
  local label=$1
  shift
  /usr/bin/time -f "%e %U %S" -o "$tmp/$label.time" "$@" >"$tmp/$label.log" 2>&1 || { cat "$tmp/$label.log"; exit 1; }
  awk '{ printf "%.1f %.1f", $1, $2 + $3 }' "$tmp/$label.time" >"$tmp/$label.secs"
}

# kiln: the installed package, examples/ configured against it, then custom_loop compiled and linked.
cmake --install "$build" --prefix "$tmp/kiln" >/dev/null
cmake -S "$src/examples" -B "$tmp/kiln-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$tmp/kiln" \
  -DCMAKE_CXX_COMPILER_LAUNCHER= >/dev/null
timed kiln_build cmake --build "$tmp/kiln-build" --target custom_loop
timed kiln_classify_build cmake --build "$tmp/kiln-build" --target classify
# libtorch: the same flags as the kiln example's Release build.
timed torch_build g++ -std=c++20 -O3 -DNDEBUG -I"$torch/include" -I"$torch/include/torch/csrc/api/include" \
  "$src/tools/bench/libtorch/custom_loop.cpp" -o "$tmp/custom_loop_torch" \
  -L"$torch/lib" -Wl,-rpath,"$torch/lib" -ltorch -ltorch_cpu -lc10
timed torch_classify_build g++ -std=c++20 -O3 -DNDEBUG -I"$torch/include" -I"$torch/include/torch/csrc/api/include" \
  -I/usr/include/opencv4 "$src/tools/bench/libtorch/classify.cpp" -o "$tmp/classify_torch" \
  -L"$torch/lib" -Wl,-rpath,"$torch/lib" -ltorch -ltorch_cpu -lc10 -lopencv_imgcodecs -lopencv_imgproc -lopencv_core

run() {  # run LABEL BINARY: trains `steps` steps, evaluates on the 10000 test images, checks the reload
  timed "$1_run" "$2" data="$tmp/data" steps="$steps" out="$tmp/$1.weights"
  cp "$tmp/$1_run.log" "$tmp/$1.run"
  sed -nE 's/^trained .*: ([0-9.]+) steps\/s$/\1/p' "$tmp/$1.run" >"$tmp/$1.rate"
  sed -nE 's/^test accuracy ([0-9.]+)%.*/\1/p' "$tmp/$1.run" >"$tmp/$1.acc"
}
run kiln "$tmp/kiln-build/custom_loop"
run torch "$tmp/custom_loop_torch"

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(getconf _NPROCESSORS_ONLN) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "kiln $(sed -nE 's/^project\(kiln VERSION ([0-9.]+).*/\1/p' "$src/CMakeLists.txt"), libtorch $torch_version (PyPI), g++ $(g++ -dumpversion), $steps steps of 64, $OMP_NUM_THREADS compute thread(s)"
row() {  # row NAME LABEL SOURCE
  printf '| %-8s | %13s | %26s | %7s | %20s | %13s |\n' "$1" "$(loc "$3")" \
    "$(awk '{ print $1 " s / " $2 " s" }' "$tmp/$2_build.secs")" "$(cat "$tmp/$2.rate")" \
    "$(awk '{ print $1 " s / " $2 " s" }' "$tmp/$2_run.secs")" "$(cat "$tmp/$2.acc")%"
}
printf '| %-8s | %13s | %26s | %7s | %20s | %13s |\n' "" "lines of code" "compile + link, wall / CPU" "steps/s" \
  "whole run, wall / CPU" "test accuracy"
row kiln kiln "$src/examples/custom_loop.cpp"
row libtorch torch "$src/tools/bench/libtorch/custom_loop.cpp"
echo
printf '| %-8s | %13s | %26s |\n' "classify" "lines of code" "compile + link, wall / CPU"
printf '| %-8s | %13s | %26s |\n' kiln "$(loc "$src/examples/classify.cpp")" "$(awk '{ print $1 " s / " $2 " s" }' "$tmp/kiln_classify_build.secs")"
printf '| %-8s | %13s | %26s |\n' libtorch "$(loc "$src/tools/bench/libtorch/classify.cpp")" \
  "$(awk '{ print $1 " s / " $2 " s" }' "$tmp/torch_classify_build.secs")"
