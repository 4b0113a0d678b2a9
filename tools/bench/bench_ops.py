#!/usr/bin/python3
"""kiln vs PyTorch on the CPU, side by side, in one run.

Runs `kiln bench matmul` and `kiln bench conv` (the built binary, default build/tools/kiln) and the
same work in PyTorch with the same thread count, then prints one table:

    case          dtype   kiln ms   torch ms   speed kiln/torch

speed kiln/torch = torch time / kiln time: above 1 means kiln is faster (2.0 = twice as fast).

  matmul        C = A @ B, A and B (n, n), torch.mm on dense tensors.
  matmul(onednn) the same product through torch's oneDNN path (F.linear on to_mkldnn() tensors),
                against the same kiln row: a like-for-like reference for kiln's oneDNN matmul,
                since the Debian torch build's torch.mm goes to whatever libblas.so.3 is
                installed (the netlib reference BLAS here, ~1 GFLOPS).
  conv_fwd      3x3, 64->64, pad 1, bias, on (32, 64, 32, 32) channels_last (kiln: NHWC (32, 32, 32, 64)).
  conv_fwd_bwd  forward + backward (input, weight and bias gradients) through autograd.

On a CPU without avx512 neither side has bf16 kernels: kiln computes bf16 in f32 (converting the
operands and rounding the result), torch falls back to its generic non-oneDNN bf16 code, so the
bf16 rows compare those fallbacks. A torch row stops timing after 20 s (at least one run).

The machine is shared, so each side is run `--repeats` times, interleaved (kiln, torch, kiln, ...),
and the best (lowest) time per row is kept.

Usage: /usr/bin/python3 tools/bench/bench_ops.py [build/tools/kiln] [--n 1024] [--threads 2] ...
(torch is the Debian python3-torch 1.13; the pyenv `python3` on PATH has no torch).
"""
import argparse
import os
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kiln", nargs="?", default="build/tools/kiln", help="path of the kiln binary")
    p.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS for kiln, torch.set_num_threads")
    p.add_argument("--n", type=int, default=1024,
                   help="matmul size (kiln's own default is 4096; torch.mm on the reference BLAS takes "
                        "minutes per 4096 product, hence the smaller default here)")
    p.add_argument("--matmul-iters", type=int, default=3)
    p.add_argument("--conv-iters", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3, help="interleaved runs per side; the best is kept")
    p.add_argument("--skip-torch-mm", action="store_true",
                   help="leave out torch.mm (slow on a reference BLAS); keep the torch oneDNN matmul row")
    return p.parse_args()


ARGS = parse_args()
# Before torch loads its OpenMP runtime.
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(ARGS.threads)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def run_kiln(*args):
    """Rows of `kiln bench ...` as {(case, dtype): ms} for the CPU device."""
    env = dict(os.environ, OMP_NUM_THREADS=str(ARGS.threads))
    out = subprocess.run([ARGS.kiln, "bench", *args], env=env, check=True, capture_output=True, text=True).stdout
    rows, notes = {}, []
    for line in out.splitlines():
        if line.startswith("#"):
            notes.append(line)
            continue
        f = line.split()
        if len(f) == 5 and f[0] != "case" and f[1] == "cpu":
            rows[(f[0], f[2])] = float(f[3])
    return rows, notes


def time_ms(step, warmup, iters, budget_s=20.0):
    """Mean ms per step over `iters` steps after `warmup`; a row that is very slow (torch's
    non-oneDNN fallbacks) stops after `budget_s` seconds, with at least one timed step."""
    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    done = 0
    while done < iters:
        step()
        done += 1
        if time.perf_counter() - t0 > budget_s:
            break
    return (time.perf_counter() - t0) * 1e3 / done


def torch_matmul():
    rows = {}
    n = ARGS.n
    for name, dt in DTYPES.items():
        a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
        if not ARGS.skip_torch_mm:
            rows[("matmul", name)] = time_ms(lambda: torch.mm(a, b), 1, ARGS.matmul_iters)
        try:  # torch's oneDNN path; bf16 there needs avx512 and raises without it
            am, wm = a.to_mkldnn(), b.t().contiguous().to_mkldnn()
            rows[("matmul(onednn)", name)] = time_ms(lambda: F.linear(am, wm), 1, ARGS.matmul_iters)
        except RuntimeError as e:
            rows[("matmul(onednn)", name)] = None
            NOTES.add(f"torch oneDNN matmul {name}: {str(e).splitlines()[0]}")
    return rows


def torch_conv():
    rows = {}
    for name, dt in DTYPES.items():
        conv = torch.nn.Conv2d(64, 64, 3, padding=1).to(dtype=dt, memory_format=torch.channels_last)
        x = torch.randn(32, 64, 32, 32).to(dtype=dt, memory_format=torch.channels_last).requires_grad_()
        gy = torch.randn(32, 64, 32, 32).to(dtype=dt, memory_format=torch.channels_last)
        warmup = 2 if dt == torch.float32 else 1  # torch's bf16 conv here is a slow non-oneDNN path
        with torch.no_grad():
            rows[("conv_fwd", name)] = time_ms(lambda: conv(x), warmup, ARGS.conv_iters)

        def step():
            x.grad = conv.weight.grad = conv.bias.grad = None
            conv(x).backward(gy)

        rows[("conv_fwd_bwd", name)] = time_ms(step, warmup, ARGS.conv_iters)
    return rows


def keep_best(best, rows):
    for k, v in rows.items():
        if v is not None and (best.get(k) is None or v < best[k]):
            best[k] = v
        best.setdefault(k, v)


NOTES = set()


def main():
    if not os.path.exists(ARGS.kiln):
        sys.exit(f"bench_ops.py: kiln binary '{ARGS.kiln}' not found (build it: ninja -C build kiln)")
    kiln, torch_rows = {}, {}
    for r in range(ARGS.repeats):
        rows, notes = run_kiln("matmul", f"n={ARGS.n}", f"iters={ARGS.matmul_iters}", "warmup=1")
        keep_best(kiln, rows)
        NOTES.update(n for n in notes if "bf16" in n or "GPU" in n)
        keep_best(torch_rows, torch_matmul())
        rows, _ = run_kiln("conv", f"iters={ARGS.conv_iters}", "warmup=2")
        keep_best(kiln, rows)
        keep_best(torch_rows, torch_conv())
        print(f"# repeat {r + 1}/{ARGS.repeats} done", file=sys.stderr, flush=True)
    # The torch oneDNN matmul row compares against kiln's one matmul row.
    for name in DTYPES:
        if ("matmul", name) in kiln:
            kiln[("matmul(onednn)", name)] = kiln[("matmul", name)]

    print(f"# kiln vs torch {torch.__version__}, {ARGS.threads} threads, matmul n={ARGS.n}, "
          f"best of {ARGS.repeats} interleaved runs")
    print("# speed kiln/torch = torch ms / kiln ms (> 1: kiln is faster)")
    for n in sorted(NOTES):
        print(n if n.startswith("#") else "# " + n)
    print(f"{'case':<16}{'dtype':<7}{'kiln ms':>11}{'torch ms':>11}{'kiln/torch':>12}")
    order = ["matmul", "matmul(onednn)", "conv_fwd", "conv_fwd_bwd"]
    for case in order:
        for name in DTYPES:
            k, t = kiln.get((case, name)), torch_rows.get((case, name))
            if k is None and t is None:
                continue
            ks = f"{k:11.2f}" if k is not None else f"{'n/a':>11}"
            ts = f"{t:11.2f}" if t is not None else f"{'n/a':>11}"
            ratio = f"{t / k:11.2f}x" if k and t else f"{'n/a':>12}"
            print(f"{case:<16}{name:<7}{ks}{ts}{ratio}")


if __name__ == "__main__":
    main()
