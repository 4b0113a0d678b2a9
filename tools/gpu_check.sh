#!/usr/bin/env bash
# One check for a machine with a CUDA GPU (sized for about 6 minutes on one H200):
#   1. configure + build with CUDA (Release) into build-gpu: the GPU tests, and the kiln CLI when
#      its sources are all there;
#   2. ctest -L gpu (every CUDA kernel against its CPU reference);
#   3. `kiln bench matmul` and the Python comparison scripts in tools/bench/, when present.
# Exits non-zero if any step fails; each step prints a header and its own output.
# Environment: JOBS (default 16), CUDA_ARCHS (default 90: H100/H200 only, halves the build time),
# PYTHON (default python3: the one with torch), BUILD_DIR (default build-gpu).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1

JOBS=${JOBS:-16}
CUDA_ARCHS=${CUDA_ARCHS:-90}
PYTHON=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-build-gpu}
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

section "build kiln_test_gpu (-j${JOBS})"
if ! cmake --build "${BUILD_DIR}" -j "${JOBS}" --target kiln_test_gpu; then
  fail "build kiln_test_gpu"
fi
have_cli=0
if [[ -f tools/bench.cpp ]]; then
  section "build kiln (-j${JOBS})"
  if cmake --build "${BUILD_DIR}" -j "${JOBS}" --target kiln; then have_cli=1; else fail "build kiln"; fi
else
  echo "tools/bench.cpp is not there yet: the kiln CLI is not built"
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

shopt -s nullglob
scripts=(tools/bench/*.py)
if (( ${#scripts[@]} )); then
  export KILN="${BUILD_DIR}/tools/kiln" KILN_BUILD_DIR="${BUILD_DIR}"
  for s in "${scripts[@]}"; do
    section "${PYTHON} ${s}"
    PYTHONUNBUFFERED=1 "${PYTHON}" "${s}" || fail "${s}"
  done
fi

section "summary ($(($(date +%s) - t0)) s)"
if (( ${#failures[@]} )); then
  printf 'FAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo "all GPU checks passed"
