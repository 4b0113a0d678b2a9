#!/usr/bin/env bash
# tools/gpu_kit.sh: builds the GPU kit here and proves it: one archive that runs kiln's GPU check on a bare
# GPU machine (one with a driver, a CUDA 13 runtime and cuDNN 9 / cuBLAS / NCCL somewhere, as in
# /usr/local/cuda or the nvidia-* Python wheels, but no Debian development packages and no compiler use).
#
#   tools/gpu_kit.sh [--data] [--no-build] [--no-dry-run] [--out DIR]
#
# 1. Builds the CUDA variant into build-kit/ (Release, CUDA arch 90 = H100/H200, MPI off, no RPATH):
#    targets kiln and kiln_test_gpu. KIT_CMAKE_ARGS adds cmake arguments (e.g. a compiler launcher),
#    KIT_CUDA_ARCHS replaces the arch list (default 90).
# 2. Packs gpu-kit/kiln-gpu.tar.xz holding kiln-gpu/{bin/kiln, bin/kiln_test_gpu, lib/ (every shared library
#    they load except glibc's, libstdc++/libgcc_s and the CUDA libraries), configs/, gpu_check.sh, kit_env.sh,
#    bench/{bench_gpu,profile_gpu,e2e_gpu}.py, data/photos/ (7 photos, 3.7 MB, from Debian's python3-skimage
#    data folder: the e2e part's source images; KIT_PHOTOS names another folder), MANIFEST}; --data adds the Fashion-MNIST files (data/fashion-mnist/) so the check
#    trains on real data. The archive must stay under 34 MB without data (KIT_MAX_MB): the data adds
#    31.3 MB, and the data kit must fit the GPU machine's 64 MiB carry (checked too).
# 3. Dry run (skipped with --no-dry-run): unpacks the archive into an empty folder and, with only the kit's
#    lib/ (and the CUDA library folders) on LD_LIBRARY_PATH and no RPATH in any binary, checks that ldd
#    resolves every library of every kit binary and library to the kit, glibc/libstdc++/libgcc_s or CUDA;
#    trains the default config for one epoch on the CPU with the unpacked kiln; runs the unpacked GPU test
#    executable (which skips without a GPU); runs the e2e part's dry run (E2E_DRY=1 gpu_check.sh e2e: a
#    10-class folder, a few CPU steps). Any failure exits non-zero. CI runs this script.
#
# On the GPU machine (docs/cuda_backend.md, "Running the GPU check"):
#   tar -xJf gpu-kit/kiln-gpu.tar.xz -C /tmp && /tmp/kiln-gpu/gpu_check.sh tests   # then: ... bench
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

data=0 build=1 dry=1 out=gpu-kit
while (($#)); do
  case "$1" in
    --data) data=1 ;;
    --no-build) build=0 ;;
    --no-dry-run) dry=0 ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_kit.sh: unknown argument '$1'; accepted: --data --no-build --no-dry-run --out DIR" >&2; exit 2 ;;
  esac
  shift
done
build_dir=build-kit
suffix=""
((data)) && suffix=-data
max_mb=${KIT_MAX_MB:-34}
say() { echo "gpu_kit: $*"; }
die() { echo "gpu_kit: FAILED: $*" >&2; exit 1; }

# --- 1. build -----------------------------------------------------------------------------------------
if ((build)); then
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [[ -x "$nvcc" ]] || die "nvcc not found (PATH or /usr/local/cuda/bin): the kit needs the CUDA toolkit to build"
  t0=$(date +%s)
  launcher=()
  if [ "${KILN_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then  # as tools/build.sh: one cache for every clone
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  fi
  # shellcheck disable=SC2086
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="${KIT_CUDA_ARCHS:-90}" \
    -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_SKIP_RPATH=ON "${launcher[@]}" ${KIT_CMAKE_ARGS:-} >/dev/null
  cmake --build "$build_dir" -j "$(nproc)" --target kiln kiln_test_gpu
  say "built in $(($(date +%s) - t0)) s"
fi
for b in "$build_dir/tools/kiln" "$build_dir/tests/kiln_test_gpu"; do
  [[ -x "$b" ]] || die "$b is missing: run without --no-build"
done
grep -q -E "^KILN_CUDA:[A-Z]+=ON" "$build_dir/CMakeCache.txt" || die "$build_dir is not a CUDA build"

# --- 2. stage and pack --------------------------------------------------------------------------------
# Libraries the GPU machine provides: glibc's, the C++ runtime, and CUDA's (found there at run time by
# kit_env.sh). Everything else that ldd lists goes into the kit.
system_re='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s)\.so'
cuda_re='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc[a-z-]*|libnvJitLink)\.so'

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
kit="$stage/kiln-gpu"
mkdir -p "$kit/bin" "$kit/lib" "$kit/configs" "$kit/bench"
cp "$build_dir/tools/kiln" "$build_dir/tests/kiln_test_gpu" "$kit/bin/"
strip --strip-unneeded "$kit/bin/"* 2>/dev/null || true
cp configs/*.json "$kit/configs/"
cp tools/gpu_check.sh tools/kit_env.sh "$kit/"
cp tools/bench/bench_gpu.py tools/bench/profile_gpu.py tools/bench/e2e_gpu.py "$kit/bench/"
# The e2e part's photos: Debian's python3-skimage data folder (installed, or its package unpacked here:
# the package pulls ~140 others that the photos do not need).
photo_names=(astronaut.png chelsea.png coffee.png motorcycle_left.png motorcycle_right.png hubble_deep_field.jpg ihc.png)
photos=${KIT_PHOTOS:-}
if [[ -z "$photos" ]]; then
  for d in /usr/lib/python3/dist-packages/skimage/data "$build_dir/skimage/usr/lib/python3/dist-packages/skimage/data"; do
    [[ -f "$d/astronaut.png" ]] && { photos=$d; break; }
  done
fi
if [[ -z "$photos" ]]; then
  say "fetching Debian's python3-skimage for its photos (unpacked into $build_dir/skimage, not installed)"
  rm -rf "$build_dir/skimage" && mkdir -p "$build_dir/skimage"
  (cd "$build_dir/skimage" && apt-get download python3-skimage >/dev/null 2>&1 && dpkg -x python3-skimage_*.deb .) ||
    die "no photos for the e2e part: apt-get download python3-skimage failed (set KIT_PHOTOS to a folder of photos)"
  photos="$build_dir/skimage/usr/lib/python3/dist-packages/skimage/data"
fi
mkdir -p "$kit/data/photos"
if [[ -n "${KIT_PHOTOS:-}" ]]; then
  cp "$photos"/* "$kit/data/photos/"
else
  for f in "${photo_names[@]}"; do cp "$photos/$f" "$kit/data/photos/" || die "photo $photos/$f is missing"; done
fi

copied=()
for b in "$kit/bin/"*; do
  while read -r name _ path _; do
    [[ "$name" =~ $system_re || "$name" =~ $cuda_re ]] && continue
    [[ "$path" == /* ]] || die "$(basename "$b") needs $name, which ldd cannot find here"
    if [[ ! -e "$kit/lib/$name" ]]; then
      cp -L "$path" "$kit/lib/$name"
      copied+=("$name")
    fi
  done < <(ldd "$b" | grep '=>')
done
strip --strip-unneeded "$kit/lib/"* 2>/dev/null || true
if ((data)); then
  src=""
  for d in "${FASHION_MNIST_ROOT:-/usr/share/datasets/fashion-mnist}" ../shared/fashion-mnist; do
    [[ -f "$d/train-images-idx3-ubyte.gz" ]] && { src=$d; break; }
  done
  [[ -n "$src" ]] || die "--data: no Fashion-MNIST files (install dataset-fashion-mnist or set FASHION_MNIST_ROOT)"
  mkdir -p "$kit/data/fashion-mnist"
  cp "$src"/*-ubyte.gz "$kit/data/fashion-mnist/"
fi
{
  echo "kiln GPU kit"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(nvcc --version 2>/dev/null | tail -1 || true)"
  echo "cuda archs: $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build_dir/CMakeCache.txt")"
  echo "needs at run time (kit_env.sh finds them): $(ldd "$kit/bin/kiln" | awk '{print $1}' | grep -E "$cuda_re" | sort -u | tr '\n' ' ')"
  echo "packed libraries: ${copied[*]}"
  echo "data: ${suffix:+fashion-mnist}${suffix:-none}"
} >"$kit/MANIFEST"

mkdir -p "$out"
archive="$out/kiln-gpu$suffix.tar.xz"
tar -C "$stage" -cf - kiln-gpu | xz -T0 -6 >"$archive.tmp"
mv "$archive.tmp" "$archive"
bytes=$(stat -c %s "$archive")
say "$archive: $((bytes / 1024 / 1024)) MiB ($bytes bytes); $(du -sh "$kit" | cut -f1) unpacked; ${#copied[@]} libraries packed"
if ((!data)) && ((bytes > max_mb * 1000 * 1000)); then
  die "the kit is $bytes bytes, over the ${max_mb} MB limit: see MANIFEST's packed libraries"
fi
if ((data)) && ((bytes > 63 * 1024 * 1024)); then
  die "the data kit is $bytes bytes, over 63 MiB: it would not fit the GPU machine's 64 MiB carry"
fi
((dry)) || exit 0

# --- 3. dry run: the unpacked kit, nothing from this checkout ------------------------------------------
say "dry run of $archive"
rm -rf "$stage"
stage=$(mktemp -d)
tar -xJf "$archive" -C "$stage"
kit="$stage/kiln-gpu"
# kit_env.sh sets LD_LIBRARY_PATH to the kit's lib/ plus the folders of the CUDA libraries, and nothing else.
# shellcheck source=tools/kit_env.sh
source "$kit/kit_env.sh" || die "kit_env.sh could not find the CUDA libraries"
bad=0
for f in "$kit/bin/"* "$kit/lib/"*; do
  # An RPATH/RUNPATH of exactly $ORIGIN (Debian's OpenBLAS builds of libblas.so.3/liblapack.so.3 carry one) only
  # searches the folder the library sits in, which is the kit's lib/; any other path could reach outside the kit.
  rpath=$(readelf -d "$f" 2>/dev/null | sed -n -E 's/.*\((RPATH|RUNPATH)\).*\[(.*)\]/\2/p')
  if [[ -n "$rpath" && "$rpath" != '$ORIGIN' ]]; then
    echo "  $(basename "$f"): has an RPATH/RUNPATH of $rpath (it could find libraries outside the kit)"; bad=1
  fi
  while read -r line; do
    name=$(awk '{print $1}' <<<"$line")
    path=$(awk '{print $3}' <<<"$line")
    [[ "$line" == *"=>"* ]] || continue
    if [[ "$path" == "not" ]]; then
      echo "  $(basename "$f"): $name not found"; bad=1
    elif [[ "$path" == "$kit/lib/"* || "$name" =~ $system_re ]]; then
      :
    elif [[ "$name" =~ $cuda_re ]]; then
      :
    else
      echo "  $(basename "$f"): $name resolves outside the kit to $path"; bad=1
    fi
  done < <(ldd "$f" 2>&1)
done
((bad == 0)) || die "library closure: the lines above"
say "closure: every library of $(ls "$kit/bin" "$kit/lib" | grep -c .) files resolves to the kit, glibc/libstdc++ or CUDA"

fm=""
for d in "$kit/data/fashion-mnist" "${FASHION_MNIST_ROOT:-/usr/share/datasets/fashion-mnist}"; do
  [[ -f "$d/train-images-idx3-ubyte.gz" ]] && { fm=$d; break; }
done
[[ -n "$fm" ]] || die "dry run: no Fashion-MNIST files to train on (install dataset-fashion-mnist)"
runs=$(mktemp -d)
t0=$(date +%s)
(cd "$stage" && kiln-gpu/bin/kiln train kiln-gpu/configs/fashion_mnist_cnn.json device=cpu epochs=1 \
   data.root="$fm" train.runs_dir="$runs" train.plots=false) >"$runs/train.log" 2>&1 ||
  { tail -20 "$runs/train.log"; die "the unpacked kiln did not train the default config on the CPU"; }
grep -E 'top-1|val' "$runs/train.log" | tail -2 | sed 's/^/  /'
say "the unpacked kiln trained the default config for 1 epoch on the CPU in $(($(date +%s) - t0)) s"
"$kit/bin/kiln_test_gpu" --gtest_brief=1 >"$runs/gpu_tests.log" 2>&1 ||
  { tail -20 "$runs/gpu_tests.log"; die "the unpacked GPU tests failed"; }
say "the unpacked GPU tests ran: $(grep -E '^\[  PASSED  \]|^\[  SKIPPED \]' "$runs/gpu_tests.log" | head -2 | tr '\n' ' ')"
t0=$(date +%s)
OUT="$runs/e2e" E2E_DRY=1 "$kit/gpu_check.sh" e2e >"$runs/e2e.log" 2>&1 ||
  { tail -40 "$runs/e2e.log"; die "the e2e part's dry run failed"; }
grep -E '^(PASS|FAIL|e2e )' "$runs/e2e/e2e-summary.txt" | sed 's/^/  /'
say "the e2e part's dry run passed in $(($(date +%s) - t0)) s"
rm -rf "$runs"
say "dry run passed"
