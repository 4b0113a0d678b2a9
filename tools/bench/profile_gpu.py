#!/usr/bin/env python3
"""Where a ResNet-50 training step spends its GPU time, kiln against PyTorch, kernel by kernel.

  profile_gpu.py torch --precision fp16 --batch 256 --out torch_fp16.csv
      PyTorch (the model and step of bench_gpu.py), torch.profiler over --steps steps after --warmup:
      one row per kernel name: calls and microseconds per step.
  profile_gpu.py ncu ncu_kiln_fp16.csv --steps 3 --out kiln_fp16.csv
      the same table from an ncu CSV of kiln, recorded with
        ncu --csv --metrics gpu__time_duration.sum --profile-from-start off --clock-control none \\
            --cache-control none kiln bench train ... steps=3 profile=1
  profile_gpu.py compare kiln_fp16.csv torch_fp16.csv [...]
      milliseconds per step by kind of kernel (convolution, batch norm, elementwise, ...) for each table,
      then each table's heaviest kernels.

ncu times kernels one at a time (serialized, each replayed alone); torch.profiler times them as they ran.
Both sum kernel time only: launch gaps and host time are not in these figures (bench_gpu.py has the
images/s). Runs on the GPU machine (torch, ncu) and here (ncu, compare).
"""
import argparse
import collections
import csv
import os
import re
import sys

# First match wins; kernel names are matched lower-cased.
KINDS = [
    ("batch norm", r"batch_norm|batchnorm|bn_fw|bn_bw|bnfw|bnbw|bn_nhwc|channel_kernel|eval_coef|welford|col_reduce|finalize_kernel"),
    # pooling before conv: PyTorch's max_pool_forward_nhwc is a pooling kernel; "conv(?!ert)" keeps
    # kiln's convert_kernel (dtype casts) out of the convolutions.
    ("pooling", r"pool|max_fwd|max_bwd|avg_fwd|avg_bwd|adaptive|global_bwd"),
    ("conv (cuDNN)", r"conv(?!ert)|xmma|implicit|dgrad|wgrad|fprop|cudnn|winograd|fft|sm90_|sm80_|cutlass"),
    ("gemm (cuBLAS)", r"gemm|cublas"),
    ("loss/softmax", r"softmax|ce_forward|ce_backward|nll|cross_entropy|step_stats|log_softmax"),
    ("optimizer", r"multi_tensor|sgd|foreach|sumsq|amp_|unscale|nonfinite|_amp_"),
    ("reduction", r"reduce"),
    ("elementwise", r"elementwise|vectorized|unrolled|broadcast|flat_kernel|convert|copy|fill|relu|threshold|add"),
]


def kind_of(name):
    n = name.lower()
    for kind, rx in KINDS:
        if re.search(rx, n):
            return kind
    return "other"


def write_table(rows, out):
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "calls_per_step", "us_per_step"])
        for name, (calls, us) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
            w.writerow([name, f"{calls:.2f}", f"{us:.1f}"])
    print(f"wrote {out}: {len(rows)} kernels, {sum(v[1] for v in rows.values()) / 1000:.2f} ms per step")


def read_table(path):
    rows = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows[r["kernel"]] = (float(r["calls_per_step"]), float(r["us_per_step"]))
    return rows


def cmd_torch(a):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_gpu
    step = bench_gpu.torch_step(a.batch, a.precision, quiet=True)

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    rows = collections.defaultdict(lambda: [0.0, 0.0])
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        r = rows[e.name]
        r[0] += 1.0 / a.steps
        r[1] += e.time_range.elapsed_us() / a.steps  # a kernel event's own span, microseconds
    write_table({k: tuple(v) for k, v in rows.items()}, a.out)


def cmd_ncu(a):
    rows = collections.defaultdict(lambda: [0.0, 0.0])
    with open(a.csv, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own ==PROF== lines too
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        us = v / 1000.0 if unit in ("ns", "nsecond") else v * 1000.0 if unit in ("ms", "msecond") else v
        row = rows[r["Kernel Name"]]
        row[0] += 1.0 / a.steps
        row[1] += us / a.steps
    if not rows:  # no permission for the counters, the profiled range never entered, renamed columns
        sys.exit(f"{a.csv}: no gpu__time_duration.sum rows (ncu profiled no kernel; see its ==PROF== lines)")
    write_table({k: tuple(v) for k, v in rows.items()}, a.out)


def cmd_compare(a):
    tables = [(os.path.basename(p).rsplit(".", 1)[0], read_table(p)) for p in a.tables]
    kinds = [k for k, _ in KINDS] + ["other"]
    print("ms per step by kind of kernel")
    print(f"{'kind':<16}" + "".join(f"{n[:14]:>15}" for n, _ in tables))
    for kind in kinds + ["total"]:
        vals = []
        for _, t in tables:
            sel = t.items() if kind == "total" else [(k, v) for k, v in t.items() if kind_of(k) == kind]
            vals.append(sum(v[1] for _, v in sel) / 1000)
        print(f"{kind:<16}" + "".join(f"{v:>15.2f}" for v in vals))
    for name, t in tables:
        print(f"\n{name}: the {a.top} heaviest kernels (calls/step, ms/step, kind)")
        for k, (calls, us) in sorted(t.items(), key=lambda kv: -kv[1][1])[:a.top]:
            print(f"  {calls:7.1f} {us / 1000:8.3f}  {kind_of(k):<14} {k[:110]}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch")
    t.add_argument("--precision", default="fp16", choices=["fp32", "fp16", "bf16"])
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--steps", type=int, default=3)
    t.add_argument("--warmup", type=int, default=5)
    t.add_argument("--out", required=True)
    n = sub.add_parser("ncu")
    n.add_argument("csv")
    n.add_argument("--steps", type=int, default=3)
    n.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("tables", nargs="+")
    c.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    {"torch": cmd_torch, "ncu": cmd_ncu, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    main()
