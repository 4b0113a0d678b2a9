#!/usr/bin/env bash
# One check for a machine with a CUDA GPU (sized for about 6 minutes on one H200, 16 cores):
#   1. configure + build with CUDA (Release, arch 90) into build-gpu: kiln_test_gpu and the kiln CLI;
#   2. ctest -L gpu: every CUDA kernel against its CPU reference, every public op on the GPU against
#      the same op on the CPU (forward and backward), whole training steps (ResNet, LeNet; SGD, AdamW)
#      on both devices;
#   3. `kiln info`, `kiln bench matmul` (CPU and GPU rows, n=4096);
#   4. tools/bench/bench_gpu.py: bf16/fp32 matmul 8192^3 TFLOPS and ResNet-50 training images/s
#      (fp32 batch 128; fp16 and bf16 batch 256), kiln vs PyTorch on this GPU (needs a python3 with torch+CUDA; the kiln columns run without);
#   5. `kiln train configs/fashion_mnist_resnet20.json device=0 epochs=$EPOCHS` (default 3 of the
#      config's 15, to fit the time box: the accuracy printed is after 3 epochs) on the Fashion-MNIST
#      files in $FASHION_MNIST_ROOT (default /usr/share/datasets/fashion-mnist, then
#      shared/fashion-mnist or data/fashion-mnist in the checkout); without them, the same model on
#      synthetic 28x28x1 data (a speed figure only);
#   6. the same in precision=fp16 (dynamic loss scaling: the skipped steps are printed; issue: <= 1%);
#   7. AutoBatch on the device: ResNet-50 on synthetic 224x224 data with batch=-1 (60% of the free
#      memory), 5 steps: prints what it measured and chose, then the training peak against the target.
# The CPU comparison scripts in tools/bench/ (bench_ops.py, bench_train.py) are not run here.
# Exits non-zero if any step fails; each step prints a header and its own output.
# Environment: JOBS (default 16), CUDA_ARCHS (default 90: H100/H200 only, halves the build time),
# PYTHON (default python3: the one with torch), BUILD_DIR (default build-gpu), EPOCHS (default 3),
# FASHION_MNIST_ROOT.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1

JOBS=${JOBS:-16}
CUDA_ARCHS=${CUDA_ARCHS:-90}
PYTHON=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-build-gpu}
EPOCHS=${EPOCHS:-3}
failures=()
section() { printf '\n==================== %s ====================\n' "$*"; }
fail() {
  echo "FAILED: $*"
  failures+=("$*")
}
t0=$(date +%s)

section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
nvcc --version 2>/dev/null | tail -1 || echo "nvcc: not found"
cmake --version | head -1

# cuDNN and NCCL from /usr/local/cuda, else from the Python wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13).
extra_flags=()
py_pkg_dir() { "$PYTHON" -c "import importlib, os; m = importlib.import_module('$1'); print(os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0])" 2>/dev/null; }
for lib in cudnn nccl; do
  if ! ls /usr/local/cuda/lib64/lib${lib}.so* >/dev/null 2>&1; then
    dir=$(py_pkg_dir "nvidia.${lib}")
    so=$(ls "${dir}"/lib/lib${lib}.so* 2>/dev/null | head -1)
    if [[ -n "${so}" ]]; then
      echo "using ${lib} from ${dir}"
      upper=${lib^^}
      extra_flags+=("-DKILN_${upper}_LIB=${so}")
      inc_flags="${inc_flags:-} -I${dir}/include"
      export LD_LIBRARY_PATH="${dir}/lib:${LD_LIBRARY_PATH:-}"
    else
      echo "warning: lib${lib} not found in /usr/local/cuda/lib64 nor in the ${PYTHON} package nvidia.${lib}"
    fi
  fi
done
if [[ -n "${inc_flags:-}" ]]; then
  extra_flags+=("-DCMAKE_CXX_FLAGS=${inc_flags}" "-DCMAKE_CUDA_FLAGS=${inc_flags}")
fi

section "configure (CUDA on, Release, archs ${CUDA_ARCHS})"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if ! cmake -S . -B "${BUILD_DIR}" "${generator[@]}" -DKILN_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS}" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" "${extra_flags[@]}"; then
  fail "configure"
  section "summary"
  echo "configure failed (missing dependencies? the CPU backend needs oneDNN, OpenCV, nlohmann-json, zlib, gtest)"
  exit 1
fi

section "build kiln_test_gpu and kiln (-j${JOBS})"
have_cli=0
if cmake --build "${BUILD_DIR}" -j "${JOBS}" --target kiln_test_gpu kiln; then
  have_cli=1
else
  fail "build"
  cmake --build "${BUILD_DIR}" -j "${JOBS}" --target kiln && have_cli=1
fi
echo "build done after $(($(date +%s) - t0)) s"

if [[ -x "${BUILD_DIR}/tests/kiln_test_gpu" ]]; then
  section "ctest -L gpu"
  if ! ctest --test-dir "${BUILD_DIR}" -L gpu --output-on-failure --timeout 120; then fail "gpu tests"; fi
  # A test that skipped on a machine with a GPU means the GPU was not seen.
  if "${BUILD_DIR}/tests/kiln_test_gpu" --gtest_list_tests >/dev/null 2>&1 &&
     "${BUILD_DIR}/tests/kiln_test_gpu" --gtest_filter='CudaRuntime.ContextsMemInfoAndVersions' 2>&1 | grep -q SKIPPED; then
    fail "the GPU tests skipped: no CUDA device visible to the test process"
  fi
fi

if [[ ${have_cli} == 1 ]]; then
  section "kiln info"
  "${BUILD_DIR}/tools/kiln" info || fail "kiln info"
  section "kiln bench matmul"
  "${BUILD_DIR}/tools/kiln" bench matmul || fail "kiln bench matmul"
fi

if [[ ${have_cli} == 1 ]]; then
  section "${PYTHON} tools/bench/bench_gpu.py (kiln vs PyTorch)"
  KILN="${BUILD_DIR}/tools/kiln" PYTHONUNBUFFERED=1 "${PYTHON}" tools/bench/bench_gpu.py "${BUILD_DIR}/tools/kiln" ||
    fail "bench_gpu.py"

  root=""
  for d in "${FASHION_MNIST_ROOT:-/usr/share/datasets/fashion-mnist}" shared/fashion-mnist data/fashion-mnist; do
    if [[ -f "${d}/train-images-idx3-ubyte.gz" ]]; then root=${d}; break; fi
  done
  runs=$(mktemp -d)
  if [[ -n "${root}" ]]; then
    section "kiln train configs/fashion_mnist_resnet20.json device=0 epochs=${EPOCHS} (the config says 15; shortened to fit)"
    "${BUILD_DIR}/tools/kiln" train configs/fashion_mnist_resnet20.json device=0 epochs="${EPOCHS}" \
      data.root="${root}" train.runs_dir="${runs}" train.plots=false train.log_every=100 ||
      fail "kiln train fashion_mnist_resnet20"
  else
    section "kiln train: resnet20 on synthetic 28x28x1 data, device=0 (no Fashion-MNIST files found: speed only)"
    cat >"${runs}/synthetic.json" <<'JSON'
{"name": "synthetic_resnet20", "model": {"name": "resnet20", "in_channels": 1, "num_classes": 10},
 "data": {"source": "synthetic", "synthetic": {"size": 60000, "height": 28, "width": 28, "channels": 1,
          "num_classes": 10}, "batch_size": 128, "workers": 2},
 "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4},
 "train": {"epochs": 2, "plots": false, "log_every": 100}}
JSON
    "${BUILD_DIR}/tools/kiln" train "${runs}/synthetic.json" device=0 train.runs_dir="${runs}" ||
      fail "kiln train synthetic resnet20"
  fi
  if [[ -n "${root}" ]]; then
    section "kiln train configs/fashion_mnist_resnet20.json device=0 precision=fp16 epochs=${EPOCHS}"
    "${BUILD_DIR}/tools/kiln" train configs/fashion_mnist_resnet20.json device=0 epochs="${EPOCHS}" precision=fp16 \
      data.root="${root}" train.runs_dir="${runs}" train.plots=false train.log_every=100 ||
      fail "kiln train fashion_mnist_resnet20 fp16"
  fi

  section "AutoBatch: ResNet-50, synthetic 224x224, batch=-1, 5 steps"
  cat >"${runs}/autobatch.json" <<'JSON'
{"name": "autobatch_resnet50", "model": {"name": "resnet50", "num_classes": 1000},
 "data": {"source": "synthetic", "synthetic": {"size": 4096, "height": 224, "width": 224, "channels": 3,
          "num_classes": 1000}, "batch_size": -1, "workers": 8},
 "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
 "train": {"epochs": 1, "max_steps_per_epoch": 5, "plots": false, "log_every": 1, "cudnn_benchmark": true}}
JSON
  "${BUILD_DIR}/tools/kiln" train "${runs}/autobatch.json" device=0 train.runs_dir="${runs}" ||
    fail "kiln train resnet50 batch=-1"
  rm -rf "${runs}"
fi

section "summary ($(($(date +%s) - t0)) s)"
if (( ${#failures[@]} )); then
  printf 'FAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo "all GPU checks passed"
