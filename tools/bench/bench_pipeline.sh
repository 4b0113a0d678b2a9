#!/bin/bash
# Does the input pipeline slow training down? Trains one epoch of CONFIG twice in one go:
#   real    batches from the config's data source through the loader (workers, transforms), as
#           `kiln train` runs it;
#   memory  the same, but every step reuses the epoch's first batch, already in memory
#           (train.reuse_first_batch=true): training at zero input-pipeline cost.
# and prints the training images/s of both and real/memory. On the 2-core CPU machine the loader's
# workers share the cores with the compute threads, so this is the loader's whole cost.
#
# Usage: tools/bench/bench_pipeline.sh [CONFIG] [key=value ...]
#   CONFIG defaults to configs/fashion_mnist_cnn.json; overrides go to both runs (e.g. device=0,
#   max_steps_per_epoch=300). KILN=path/to/kiln picks the binary (default build/tools/kiln).
set -euo pipefail
cd "$(dirname "$0")/../.."
KILN=${KILN:-build/tools/kiln}
CONFIG=${1:-configs/fashion_mnist_cnn.json}
[ $# -gt 0 ] && shift
[ -x "$KILN" ] || { echo "bench_pipeline: no kiln binary at $KILN (build first: tools/build.sh)" >&2; exit 1; }
[ -f "$CONFIG" ] || { echo "bench_pipeline: no config file $CONFIG" >&2; exit 1; }
RUNS=$(mktemp -d)
trap 'rm -rf "$RUNS"' EXIT

run() {  # prints the training images/s of one epoch
  "$KILN" train "$CONFIG" epochs=1 train.plots=false train.runs_dir="$RUNS" "$@" > "$RUNS/out.txt" 2>&1 ||
    { cat "$RUNS/out.txt" >&2; exit 1; }
  sed -n 's/^final:.*(\([0-9.]*\) img\/s)$/\1/p' "$RUNS/out.txt"
}

echo "# bench_pipeline: $CONFIG, 1 epoch each, $(nproc) cores; overrides: ${*:-none}"
real=$(run "$@")
memory=$(run "$@" train.reuse_first_batch=true)
printf "%-8s %12s\n" "input" "images/s"
printf "%-8s %12s\n" "real" "$real"
printf "%-8s %12s\n" "memory" "$memory"
awk -v r="$real" -v m="$memory" 'BEGIN { printf "real/memory %.3f (the pipeline costs %.1f%% of the throughput)\n", r / m, 100 * (1 - r / m) }'
