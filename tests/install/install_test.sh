#!/usr/bin/env bash
# kiln as a C++ library (docs/library.md), end to end, in a temporary folder:
#   1. `cmake --install` of THIS build into a fresh prefix;
#   2. examples/ configured and built against that prefix only (find_package(kiln), kiln::deploy), with
#      ONNX, protobuf and MPI hidden from CMake (the deployment library needs none of them); the
#      base export set names none of them; every component (engine, onnx, cli) also loads; the
#      example's compile commands and the installed package must not name the source or build tree;
#   3. the installed `kiln` trains a tiny linear classifier on 16 synthetic 8x8 images until it fits
#      them, and `kiln data export` writes those images as PNG files;
#   4. the example (kiln::Predictor) classifies every exported image: five "NAME PROBABILITY" lines, most
#      probable first, the names those of the run's classes.json, and the top class is the image's
#      class folder (the model fits its training set); with a config and weights file, the source's names;
#   5. examples/custom_loop (<kiln/kiln.h>, a Module subclass, a hand-written loop) trains 5 steps on
#      Fashion-MNIST (a small random IDX set written here when dataset-fashion-mnist is not installed),
#      saves in PyTorch's layout, reloads, and every prediction agrees.
#   6. examples/ again with every component: user_kiln (a kiln with the user's my_components.cpp) lists the
#      user's model and transform in `train --help`; engine_model trains them on Fashion-MNIST straight, and
#      again stopped by SIGINT mid-epoch and resumed: the same metrics and last weights, bit for bit; then
#      user_kiln predicts and exports ONNX from that run folder (kiln's own kiln refuses its model by name).
# Usage: install_test.sh BUILD_DIR SOURCE_DIR CXX_COMPILER [COMPILER_LAUNCHER]   (tests/CMakeLists.txt)
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) cxx=$3 launcher=${4:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln_install_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_test: FAILED: $*" >&2; exit 1; }

# 1. install
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
for f in bin/kiln lib/cmake/kiln/kilnConfig.cmake lib/cmake/kiln/kilnConfigVersion.cmake \
         lib/cmake/kiln/kilnTargets.cmake lib/cmake/kiln/kilnEngineTargets.cmake lib/cmake/kiln/kilnOnnxTargets.cmake \
         lib/cmake/kiln/kilnCliTargets.cmake include/kiln/core/tensor.h include/kiln/tools/deploy/predict.h include/kiln/core/ops/conv2d.h \
         include/kiln/core/io/safetensors.h include/kiln/models/registry.h include/kiln/tools/cli/commands.h; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
for lib in core layers optim data models deploy engine onnx cli; do
  compgen -G "$prefix/lib*/libkiln_$lib.a" >/dev/null || fail "libkiln_$lib.a is not installed"
done
if grep -rlF -e "$src/" -e "$build/" "$prefix/lib/cmake" "$prefix/include"; then
  fail "the installed package names the source or build tree (files above)"
fi
if grep -nE "MPI::|onnx|[Pp]rotobuf" "$prefix"/lib/cmake/kiln/kilnTargets*.cmake; then  # kilnTargets(-release).cmake
  fail "the base export set (kilnTargets.cmake: core .. deploy) names ONNX, protobuf or MPI (lines above)"
fi

# 2. build the example against the installed package only (a copy of examples/, away from the tree)
cp -r "$src/examples" "$tmp/examples"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$tmp/examples" -B "$tmp/ex" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_DISABLE_FIND_PACKAGE_ONNX=ON -DCMAKE_DISABLE_FIND_PACKAGE_Protobuf=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configure examples/ without ONNX, protobuf and MPI"; }
grep -qxF "kiln_DIR:PATH=$prefix/lib/cmake/kiln" "$tmp/ex/CMakeCache.txt" ||
  fail "find_package(kiln) did not take the installed package: $(grep kiln_DIR "$tmp/ex/CMakeCache.txt")"
cmake --build "$tmp/ex" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build examples/"; }
grep -qE -- "(-I|-isystem )$prefix/include/kiln " "$tmp/ex/compile_commands.json" ||
  fail "the example is not compiled with $prefix/include/kiln: $(cat "$tmp/ex/compile_commands.json")"
if grep -F -e "$src/" -e "$build/" "$tmp/ex/compile_commands.json"; then
  fail "the example's compile command names the source or build tree"
fi

# 2b. every component loads (and links its dependencies) for a consumer that asks for it
mkdir -p "$tmp/components"
cat >"$tmp/components/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(kiln_components LANGUAGES CXX)
find_package(kiln 0.1 REQUIRED COMPONENTS engine onnx cli)
foreach(t kiln::deploy kiln::engine kiln::onnx kiln::cli kiln::kiln)
  if(NOT TARGET ${t})
    message(FATAL_ERROR "find_package(kiln COMPONENTS engine onnx cli) gave no ${t}")
  endif()
endforeach()
CMAKE
cmake -S "$tmp/components" -B "$tmp/components/b" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" \
  >"$tmp/components.log" 2>&1 || { cat "$tmp/components.log"; fail "find_package(kiln COMPONENTS engine onnx cli)"; }
cmake -S "$tmp/components" -B "$tmp/components/b2" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_DISABLE_FIND_PACKAGE_ONNX=ON >"$tmp/components2.log" 2>&1 &&
  fail "find_package(kiln COMPONENTS onnx) passed with ONNX hidden: the onnx component must find ONNX"

# 3. a model that fits its 16 training images, trained by the installed kiln; the images as PNG files
cd "$tmp"
cat >tiny.json <<'JSON'
{
  "name": "tiny",
  "model": {"layers": [{"type": "flatten"}, {"type": "linear", "in_features": 64, "out_features": 6}]},
  "data": {"source": "synthetic", "synthetic": {"size": 16, "height": 8, "width": 8, "channels": 1, "num_classes": 6},
           "train_transforms": [{"type": "normalize", "mean": [0.5], "std": [0.25]}],
           "val_transforms": [{"type": "normalize", "mean": [0.5], "std": [0.25]}],
           "batch_size": 16, "workers": 0},
  "optim": {"name": "sgd", "lr": 0.5, "momentum": 0.9},
  "train": {"epochs": 60, "device": "cpu", "plots": false, "runs_dir": "runs", "log_every": 1000}
}
JSON
"$prefix/bin/kiln" train tiny.json >train.log 2>&1 || { cat train.log; fail "kiln train"; }
grep -q "^train 60/60 .* acc 100.0%" train.log || { cat train.log; fail "the tiny model did not fit its training images"; }
"$prefix/bin/kiln" data export tiny.json out=images split=train >/dev/null

# 4. classify every image with the example: the run folder, whose classes.json names the classes (renamed
#    here, so that the names can only come from it; a name with a space, as Fashion-MNIST's "Ankle boot")
names=(zero one two three four "five and a half")
printf '["zero", "one", "two", "three", "four", "five and a half"]\n' >runs/tiny/classes.json
rm -rf runs/tiny/best runs/tiny/best.*  # the run then stands for its last weights, those that fit the training images
n=0
for img in images/train/*/*.png; do
  class=$(basename "$(dirname "$img")")
  "$tmp/ex/classify" runs/tiny "$img" >out.txt 2>err.txt || { cat err.txt; fail "classify $img"; }
  [ -s err.txt ] && { cat err.txt; fail "classify $img wrote to stderr"; }
  [ "$(wc -l <out.txt)" -eq 5 ] || { cat out.txt; fail "classify $img: expected 5 lines"; }
  awk -v want="${names[$((10#$class))]}" '
    BEGIN { n = split("zero one two three four", w, " "); for (i = 1; i <= n; ++i) ok[w[i]] = 1; ok["five and a half"] = 1 }
    { p = $NF; name = $0; sub(/ [^ ]+$/, "", name) }
    NF < 2 || !(name in ok) || p < 0 || p > 1 { print "bad line: " $0; bad = 1 }
    NR == 1 && name != want { print "top class " name ", image class " want; bad = 1 }
    NR > 1 && p > prev { print "not sorted: " $0; bad = 1 }
    seen[name]++ { print "class twice: " $0; bad = 1 }
    { prev = p; sum += p }
    END { if (sum > 1.0001) { print "probabilities sum to " sum; bad = 1 } exit bad }' out.txt ||
    { cat out.txt; fail "classify $img"; }
  n=$((n + 1))
done
[ "$n" -eq 16 ] || fail "expected 16 exported images, classified $n"
# A config and a weights file: the names of the config's data source (synthetic: the numbers).
img=$(ls images/train/*/*.png | tail -1)
class=$((10#$(basename "$(dirname "$img")")))
"$tmp/ex/classify" runs/tiny/config.json runs/tiny/last.safetensors "$img" >out.txt 2>err.txt || { cat err.txt; fail "classify CONFIG WEIGHTS"; }
[ "$(head -1 out.txt | cut -d' ' -f1)" = "$class" ] || { cat out.txt; fail "classify CONFIG WEIGHTS $img: expected class $class first"; }
"$tmp/ex/classify" runs/tiny missing.png 2>err.txt && fail "a missing image passed"
grep -q "missing.png" err.txt || { cat err.txt; fail "the error does not name the missing image"; }

# 5. the hand-written loop, a few steps (its own exit status checks that the reloaded model agrees)
[ -f "$prefix/include/kiln/kiln.h" ] || fail "the umbrella header include/kiln/kiln.h is not installed"
data=/usr/share/datasets/fashion-mnist
if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then  # 96 + 64 random 28x28 images, labels 0..9 in turn
  data=$tmp/idx
  mkdir -p "$data"
  idx() {  # idx NAME COUNT: images-idx3 and labels-idx1 files
    local n
    n=$(printf '\\x%02x' "$2")  # the count's low byte (COUNT < 256)
    printf "\\x00\\x00\\x08\\x03\\x00\\x00\\x00$n\\x00\\x00\\x00\\x1c\\x00\\x00\\x00\\x1c" >"$data/$1-images-idx3-ubyte"
    head -c $(($2 * 784)) /dev/urandom >>"$data/$1-images-idx3-ubyte"
    printf "\\x00\\x00\\x08\\x01\\x00\\x00\\x00$n" >"$data/$1-labels-idx1-ubyte"
    for ((i = 0; i < $2; ++i)); do printf "\\x0$((i % 10))"; done >>"$data/$1-labels-idx1-ubyte"
  }
  idx train 96
  idx t10k 64
fi
"$tmp/ex/custom_loop" data="$data" epochs=10 steps=5 eval=256 out="$tmp/loop.safetensors" >loop.txt 2>&1 ||
  { cat loop.txt; fail "custom_loop on $data"; }
grep -qE "^trained 5 steps " loop.txt || { cat loop.txt; fail "custom_loop did not train 5 steps"; }
grep -qE "agrees on ([0-9]+) of \1 predictions" loop.txt || { cat loop.txt; fail "custom_loop: the reloaded model disagrees"; }

# 6. your components trained by kiln's engine (example b) and your own kiln (example c): examples/ configured
#    again, with every component found (MPI, ONNX, protobuf visible)
cmake -S "$tmp/examples" -B "$tmp/ex2" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  >"$tmp/configure2.log" 2>&1 || { cat "$tmp/configure2.log"; fail "configure examples/ with every component"; }
cmake --build "$tmp/ex2" --target engine_model user_kiln >"$tmp/build2.log" 2>&1 || { cat "$tmp/build2.log"; fail "build engine_model and user_kiln"; }
# (c) the user's kiln lists the user's model and transform with their keys and meanings
"$tmp/ex2/user_kiln" train --help >help.txt || fail "user_kiln train --help"
for want in 'model.name = "tiny_cnn": two conv-BN-ReLU-pool stages' 'model.width  integer, default 16; accepted: 1..512' \
            'channels of the first stage; the second has twice as many' 'data.*_transforms[].p' \
            'the probability of inverting an image' 'random_invert'; do
  grep -qF -- "$want" help.txt || { cat help.txt; fail "user_kiln train --help does not list: $want"; }
done
grep -qF 'tiny_cnn' <("$prefix/bin/kiln" train --help) && fail "kiln's own train --help lists the user's tiny_cnn"
# (b) trained straight, and trained with a SIGINT mid-epoch then resumed: the same epochs, bit for bit
ex_cfg=(train.runs_dir=runs train.save_every_steps=40 train.max_steps_per_epoch=100 train.log_every=0)
"$tmp/ex2/engine_model" "$src/examples/tiny_cnn.json" "${ex_cfg[@]}" name=straight >straight.log 2>&1 ||
  { cat straight.log; fail "engine_model (straight)"; }
"$tmp/ex2/engine_model" "$src/examples/tiny_cnn.json" "${ex_cfg[@]}" name=cut >cut.log 2>&1 &
pid=$!
for _ in $(seq 600); do [ -e runs/cut/last ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -INT $pid
status=0; wait $pid || status=$?
[ "$status" -eq 130 ] || { cat cut.log; fail "engine_model after SIGINT: exit status $status, expected 130 (saved and stopped)"; }
# the hint names how this program resumes (kiln's own `kiln train` would not know tiny_cnn)
grep -qF 'resume with: kiln::train("runs/cut")' cut.log || { cat cut.log; fail "engine_model's SIGINT message does not say how it resumes"; }
"$tmp/ex2/engine_model" runs/cut >resumed.log 2>&1 || { cat resumed.log; fail "engine_model runs/cut (resume)"; }
grep -q "resumed" resumed.log || { cat resumed.log; fail "engine_model runs/cut did not resume"; }
diff <(cut -d, -f1-8 runs/straight/metrics.csv) <(cut -d, -f1-8 runs/cut/metrics.csv) ||
  fail "the interrupted and resumed run's metrics differ from the straight run's (above)"
cmp runs/straight/last.safetensors runs/cut/last.safetensors || fail "the resumed run's last weights differ from the straight run's"
# what a built-in model gets, the user's gets: bf16, gradient checkpointing of its declared units,
# AutoBatch, TensorBoard and the report; then data parallelism under mpirun (two CPU ranks)
"$tmp/ex2/engine_model" "$src/examples/tiny_cnn.json" train.runs_dir=runs name=feat precision=bf16 checkpoint=blocks \
  batch=-1 train.tensorboard=true epochs=1 train.max_steps_per_epoch=3 >feat.log 2>&1 || { cat feat.log; fail "engine_model with bf16, checkpoint=blocks, batch=-1"; }
grep -qF '"precision": "bf16"' runs/feat/config.json && grep -qF '"checkpoint": "blocks"' runs/feat/config.json &&
  grep -q '^AutoBatch: ' runs/feat/train.log && compgen -G 'runs/feat/events.out.tfevents.*' >/dev/null &&
  [ -s runs/feat/report.csv ] || { cat feat.log; ls runs/feat; fail "engine_model: the run lacks bf16, checkpoint=blocks, AutoBatch, TensorBoard or the report"; }
if grep -qE '^KILN_SANITIZE:STRING=.|^KILN_FUZZ:BOOL=(ON|TRUE|1)$' "$build/CMakeCache.txt"; then
  # Open MPI's own allocations (its plugins among them) read as leaks under LeakSanitizer: the sanitizer
  # check leaves MPI to the normal build (it skips Mpi.* as well)
  echo "install_test: engine_model under mpirun skipped in a sanitizer build"
elif command -v mpirun >/dev/null; then
  mpirun -np 2 --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$tmp/ex2/engine_model" "$src/examples/tiny_cnn.json" train.runs_dir=runs name=mpi epochs=1 train.max_steps_per_epoch=3 \
    >mpi.log 2>&1 || { cat mpi.log; fail "mpirun -np 2 engine_model"; }
  grep -qF 'on cpu x2 ranks' runs/mpi/train.log || { cat mpi.log; fail "engine_model under mpirun did not train on 2 ranks"; }
fi
# predict and export from the run folder, with the user's kiln (it rebuilds tiny_cnn by name)
"$tmp/ex2/user_kiln" data export "$src/examples/tiny_cnn.json" out=fm split=val limit=3 >/dev/null || fail "user_kiln data export"
img=$(ls fm/val/*/*.png | head -1)
"$tmp/ex2/user_kiln" predict runs/cut "$img" >pred.txt || { cat pred.txt; fail "user_kiln predict runs/cut"; }
"$prefix/bin/kiln" predict runs/cut "$img" >/dev/null 2>err.txt && fail "kiln's own predict rebuilt the user's tiny_cnn"
# the first of the user's components it reads (the transform random_invert, or tiny_cnn), and the linking hint
grep -qE '"(random_invert|tiny_cnn)" is not a' err.txt && grep -qF 'is not linked in' err.txt ||
  { cat err.txt; fail "kiln's own predict: the error names neither the user's component nor what to link"; }
"$tmp/ex2/user_kiln" export runs/cut format=onnx out=cut.onnx >export.log 2>&1 || { cat export.log; fail "user_kiln export runs/cut"; }
[ -s cut.onnx ] || fail "user_kiln export wrote no cut.onnx"
echo "install_test: engine_model trained tiny_cnn straight and with a SIGINT (resumed bit-exact); user_kiln listed its keys, predicted and exported it"

echo "install_test: installed into a temporary prefix, built examples/classify and custom_loop against the base component alone (ONNX, protobuf, MPI hidden), loaded every component, classified $n images correctly, custom_loop trained on $data and its reload agreed"
