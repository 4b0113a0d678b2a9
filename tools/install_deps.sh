#!/usr/bin/env bash
# Installs what kiln needs from Debian's packages (Debian 12). Safe to run again: it installs only
# what is missing. clang, its sanitizer/libFuzzer runtimes and libomp serve tools/sanitize_check.sh
# (docs/testing.md). The CUDA backend is built when /usr/local/cuda (nvcc, cuDNN 9, NCCL) is present.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libdnnl-dev libopencv-dev nlohmann-json3-dev libgtest-dev
      zlib1g-dev libjpeg-dev libpng-dev libwebp-dev libopenmpi-dev openmpi-bin dataset-fashion-mnist
      ocl-icd-opencl-dev  # libdnnl-dev only recommends it, but its CMake config requires OpenCL
      libonnx-dev         # kiln export format=onnx (tools/onnx/onnx_export.h)
      libprotobuf-dev     # libonnx-dev's onnx_proto target links protobuf (not a dependency of the package)
      protobuf-compiler   # protoc: the TensorBoard event messages (tools/engine/tensorboard_event.proto)
      xz-utils            # tools/gpu_kit.sh packs the GPU kit as .tar.xz
      ccache              # tools/build.sh compiles through it: a rebuild, a fresh clone, CI compile nothing twice
      clang libclang-rt-14-dev libomp-dev)  # tools/sanitize_check.sh: ASan+UBSan and libFuzzer builds
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "kiln: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# cuDNN's frontend headers (PyPI, header-only; optional): only where the CUDA backend can be built.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  "$(dirname "$0")/fetch_cudnn_frontend.sh"
fi
echo "kiln: dependencies present"
