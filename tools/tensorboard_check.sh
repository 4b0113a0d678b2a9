#!/usr/bin/env bash
# Reads a run folder's TensorBoard event files with TensorBoard's own reader (EventAccumulator) and
# prints each scalar tag with its number of points and its first and last (step, value): a check that
# kiln's event files (tools/engine/tensorboard.h) are what TensorBoard reads. Not part of the test suite
# (which needs no Python): it makes a virtual environment with PyPI's tensorboard the first time.
# Usage: tools/tensorboard_check.sh RUN   (a run folder, runs/<name>)
#        KILN_TB_VENV=DIR to keep the environment elsewhere (default: build/tensorboard-venv)
set -euo pipefail
run=${1:?usage: tools/tensorboard_check.sh RUN (a run folder holding events.out.tfevents.* files)}
[ -d "$run" ] || { echo "tensorboard_check: $run is not a folder" >&2; exit 2; }
ls "$run"/events.out.tfevents.* >/dev/null 2>&1 || { echo "tensorboard_check: no events.out.tfevents.* in $run (train.tensorboard=false?)" >&2; exit 2; }
venv=${KILN_TB_VENV:-$(cd "$(dirname "$0")/.." && pwd)/build/tensorboard-venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q tensorboard
fi
"$venv/bin/python" - "$run" <<'PY'
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})  # 0: keep every point
acc.Reload()
tags = acc.Tags()["scalars"]
print(f"{len(tags)} scalar tags in {sys.argv[1]}")
for tag in sorted(tags):
    ev = acc.Scalars(tag)
    print(f"  {tag:26s} {len(ev):5d} points  first step {ev[0].step} = {ev[0].value:.6g}  last step {ev[-1].step} = {ev[-1].value:.6g}")
PY
