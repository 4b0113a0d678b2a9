#!/usr/bin/env bash
# Fetches the C++ headers of NVIDIA's cuDNN frontend (header-only; PyPI package nvidia-cudnn-frontend,
# which Debian does not package) into .whl/cudnn_frontend-<version>/include, the default of CMake's
# KILN_CUDNN_FRONTEND_DIR. Only the runtime fusion of core/cuda/conv_fusion_cuda.cu uses them
# (docs/cuda_backend.md, "cuDNN runtime fusion"); without them kiln builds and runs as before.
# Called by tools/install_deps.sh; safe to run again (does nothing when the headers are there).
# A failure (no pip, no network) is one line and exit 0: the headers are optional.
#   tools/fetch_cudnn_frontend.sh [DEST]   (DEST default: <repo>/.whl)
set -uo pipefail
version=1.32.0
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/.whl}"
out="$dest/cudnn_frontend-$version"
if [[ -f "$out/include/cudnn_frontend.h" ]]; then
  echo "kiln: cuDNN frontend $version headers present ($out/include)"
  exit 0
fi
py="$(command -v python3 || true)"
if [[ -z "$py" ]] || ! "$py" -m pip --version >/dev/null 2>&1; then
  echo "kiln: cuDNN frontend headers not fetched: python3 -m pip is not available (apt-get install python3-pip); the cuDNN runtime fusion will not be built"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Any wheel of the version carries the same headers: ask for one platform so the local Python's
# version does not matter, and never an sdist (nothing is built).
if ! "$py" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
     --python-version 3.11 --implementation cp --abi cp311 "nvidia-cudnn-frontend==$version" -d "$tmp" >"$tmp/log" 2>&1; then
  echo "kiln: cuDNN frontend headers not fetched: pip download nvidia-cudnn-frontend==$version failed ($(tail -1 "$tmp/log")); the cuDNN runtime fusion will not be built"
  exit 0
fi
whls=("$tmp"/nvidia_cudnn_frontend-*.whl)
whl=${whls[0]}
mkdir -p "$tmp/x"
if [[ ! -f "$whl" ]] || ! "$py" - "$whl" "$tmp/x" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.startswith("include/") or ".dist-info/licenses/" in n or n.endswith("LICENSE.txt")]
    z.extractall(sys.argv[2], names)
PY
then
  echo "kiln: cuDNN frontend headers not fetched: could not unpack $whl"
  exit 0
fi
if [[ ! -f "$tmp/x/include/cudnn_frontend.h" ]]; then
  echo "kiln: cuDNN frontend headers not fetched: the wheel has no include/cudnn_frontend.h"
  exit 0
fi
mkdir -p "$dest"
rm -rf "$out"
mv "$tmp/x" "$out"
echo "kiln: cuDNN frontend $version headers in $out/include"
