#!/usr/bin/env bash
# Configures and builds kiln (Release) into build/. Extra arguments go to cmake, e.g. -DKILN_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$(nproc)"
