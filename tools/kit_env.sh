# Sourced by the GPU kit's scripts (gpu_check.sh, tools/gpu_kit.sh's dry run): sets LD_LIBRARY_PATH to the
# kit's lib/ plus the folder of each CUDA library that kiln loads (cudart, cuBLAS/cuBLASLt, cuDNN, NCCL),
# looked up in /usr/local/cuda first, then in the nvidia-* Python wheels of $PYTHON (default python3), then
# in the dynamic linker's cache; prints which was used for each. Returns non-zero, naming the library, when
# one is found nowhere. Sets KIT to the unpacked kit's folder.
# shellcheck shell=bash
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export KIT

kit_env_find() {
  local need=() so dir d wheel_dirs=() found missing=0 ld="$KIT/lib"
  # The CUDA sonames the binaries ask for (ldd prints them whether or not it finds them).
  mapfile -t need < <(ldd "$KIT/bin/kiln" "$KIT/bin/kiln_test_gpu" 2>/dev/null | awk '{print $1}' |
                      grep -E '^lib(cudart|cublas|cublasLt|cudnn|nccl)\.so' | sort -u)
  local py=${PYTHON:-python3}
  if command -v "$py" >/dev/null 2>&1; then
    mapfile -t wheel_dirs < <("$py" - <<'PY' 2>/dev/null
import glob, os, site
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    roots.append(os.path.join(sp, "nvidia"))
seen = set()
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "*", "lib")) + glob.glob(os.path.join(r, "cu*", "lib"))):
        d = os.path.realpath(d)
        if d not in seen and os.path.isdir(d):
            seen.add(d)
            print(d)
PY
    )
  fi
  for so in "${need[@]}"; do
    found=""
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
      [[ -e "$d/$so" ]] && { found=$d; echo "kit_env: $so from $d (CUDA toolkit)"; break; }
    done
    if [[ -z "$found" ]]; then
      for d in "${wheel_dirs[@]}"; do
        [[ -e "$d/$so" ]] && { found=$d; echo "kit_env: $so from $d (Python wheel)"; break; }
      done
    fi
    if [[ -z "$found" ]]; then
      dir=$(ldconfig -p 2>/dev/null | awk -v s="$so" '$1 == s {print $NF; exit}')
      [[ -n "$dir" ]] && { found=$(dirname "$dir"); echo "kit_env: $so from $found (ldconfig cache)"; }
    fi
    if [[ -z "$found" ]]; then
      echo "kit_env: $so not found in /usr/local/cuda, in the nvidia-* wheels of $py, nor in ldconfig's cache" >&2
      missing=1
    elif [[ ":$ld:" != *":$found:"* ]]; then
      ld="$ld:$found"
    fi
  done
  # The driver (libcuda.so.1) is loaded by cudart at run time; add its usual container folder if the cache lacks it.
  if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib64; do
      [[ -e "$d/libcuda.so.1" ]] && { ld="$ld:$d"; echo "kit_env: libcuda.so.1 from $d"; break; }
    done
  fi
  export LD_LIBRARY_PATH="$ld"
  return $missing
}
kit_env_find
