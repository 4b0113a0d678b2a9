#!/usr/bin/env python3
"""GPU speed, kiln vs PyTorch on the same GPU, side by side in one run (for tools/gpu_check.sh).

  (a) matmul: C = A @ B, n x n x n (default 8192), bf16 and fp32, TFLOPS.
      kiln: `kiln bench matmul n=N device=cuda:0` (cuBLASLt; fp32 without TF32, as PyTorch's default)
      torch: torch.matmul, timed with torch.cuda.synchronize() around the timed runs.
  (b) ResNet-50 training, 224x224x3 synthetic images, 1000 classes, fp32 with TF32 allowed for
      convolutions (PyTorch's default; kiln's too), cuDNN benchmark mode on both, batch 128;
      forward + cross-entropy + backward + SGD (momentum 0.9, Nesterov, weight decay) per step;
      images/s over --steps timed steps after --warmup.
      kiln: `kiln bench train model=resnet50 ... device=cuda:0 cudnn_benchmark=1` (NHWC)
      torch: torchvision's resnet50 (or the same network defined here when torchvision is
      missing), channels_last.
  (c) the same ResNet-50 step in mixed precision, batch 256 (--amp-batch): fp16 and bf16.
      kiln: `kiln bench train ... precision=fp16|bf16` (f32 master weights, low-precision
      convolutions and activations; fp16 with dynamic loss scaling)
      torch: torch.autocast(dtype=float16|bfloat16) + channels_last; fp16 with torch.cuda.amp.GradScaler.

Usage: python3 tools/bench/bench_gpu.py [kiln-gpu/bin/kiln] [--n 8192] [--batch 128] [--steps 20]
                                        [--amp-batch 256] [--skip-amp] [--skip-matmul] [--summary FILE]
                                        [--kiln-ab NAME=VALUE ...] [--skip-graph] [--compile fp16,bf16]
       --kiln-ab runs each kiln ResNet-50 figure again with that environment variable set (an A/B of one
       kiln switch, e.g. KILN_CUDNN_BATCH_NORM=0: kiln's own batch-norm kernels instead of cuDNN's;
       KILN_FUSED_BN_RELU=0: batch norm, add and ReLU as three ops); repeat it for several switches
       (the kiln binary also comes from $KILN, which gpu_check.sh sets)
       each kiln ResNet-50 figure is also taken with cuda_graph=on (train.cuda_graph: the step's forward
       and backward replayed from a CUDA graph, the update eager; the default run is cuda_graph=off);
       --skip-graph leaves that run out
       --fused PRECISIONS (fp16,bf16 by default; '' for none): kiln once more in those precisions with
       fused_bn_conv=1 (model.fused_bn_conv: cuDNN's fused conv-BN-ReLU-statistics graphs in the
       bottlenecks) and cuda_graph=on: every switch on; its figure counts in "kiln best"
  (d) PyTorch's strongest: the same torch step with the model wrapped in torch.compile (default mode) in
      the --compile precisions (fp16,bf16 by default; '' for none), timed after its compilation (about a
      minute each, said in the log); the line compares kiln's best (graph off or on) with it and eager
Prints one table per part (and one line per figure to --summary); exits non-zero when a kiln run fails
(the other side's figure is still shown). kiln's share of the step that the host spent blocked is the
`host_blocked` column of `kiln bench train`, and the host's own time to issue a step its `host_ms`
(near the step's ms: the host, not the GPU, limits kiln's speed).
"""
import argparse
import os
import re
import subprocess
import sys
import time


def run_kiln(cmd, timeout, env=None):
    print("$ " + (" ".join(f"{k}={v}" for k, v in (env or {}).items()) + " " if env else "") + " ".join(cmd),
          flush=True)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        print(f"kiln: timed out after {timeout} s")
        return None
    text = out.stdout + out.stderr
    for line in text.splitlines():
        if line.startswith("#") or "error" in line:
            print("  " + line)
    if out.returncode != 0:
        # The reason: an error line was shown above, but a crash (signal, abort) prints none.
        print(f"kiln: exit status {out.returncode}" +
              (f" (signal {-out.returncode})" if out.returncode < 0 else ""))
        for line in (out.stdout.splitlines() + out.stderr.splitlines())[-20:]:
            print("  | " + line)
        return None
    return out.stdout


def kiln_matmul(kiln, n, iters, warmup):
    out = run_kiln([kiln, "bench", "matmul", f"n={n}", f"iters={iters}", f"warmup={warmup}", "device=cuda:0"], 300)
    res = {}
    for line in (out or "").splitlines():
        f = line.split()
        if len(f) == 5 and f[0] == "matmul" and f[1].startswith("cuda"):
            res[f[2]] = float(f[4])
    return res


def torch_matmul(n, iters, warmup):
    import torch
    res = {}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        g = torch.Generator(device="cuda").manual_seed(1)
        a = torch.randn(n, n, device="cuda", dtype=dt, generator=g)
        b = torch.randn(n, n, device="cuda", dtype=dt, generator=g)
        for _ in range(warmup):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        s = (time.perf_counter() - t) / iters
        res[name] = 2.0 * n ** 3 / s / 1e12
        del a, b
    torch.cuda.empty_cache()
    return res


def parse_table(out, first_column):
    """The rows of a kiln bench table as dicts keyed by its header's column names (robust to added columns)."""
    header, rows = None, []
    for line in (out or "").splitlines():
        f = line.split()
        if not f or line.startswith("#"):
            continue
        if f[0] == "model" and header is None:
            # "last loss" is two words in the header; the blocked share may follow as "blocked%".
            header = [c for c in line.replace("last loss", "last_loss").split()]
            continue
        if header and f[0] == first_column and len(f) == len(header):
            rows.append(dict(zip(header, f)))
    return rows


last_fusion_line = None  # kiln_train's run's "# fused_bn_conv=1: ... ran in N of M ..." line, if any


def kiln_train(kiln, batch, steps, warmup, precision="fp32", timeout=120, env=None, graph="off", fused=False):
    """images/s, the share of the step the host spent blocked, and the host's own ms to issue one step
    against the step's ms (None where kiln does not print them). graph: kiln's cuda_graph= (off, on);
    fused: model.fused_bn_conv (the bottlenecks through cuDNN's fused conv-BN-ReLU-stats graphs)."""
    out = run_kiln([kiln, "bench", "train", "model=resnet50", f"batch={batch}", "size=224", "channels=3",
                    "classes=1000", f"steps={steps}", f"warmup={warmup}", "device=cuda:0", "cudnn_benchmark=1",
                    f"precision={precision}", f"cuda_graph={graph}", f"fused_bn_conv={1 if fused else 0}"],
                   timeout, env)
    # run_kiln shows the "# cuda_graph..." lines: captured, or why the steps ran eagerly
    global last_fusion_line
    last_fusion_line = next((l[2:] for l in (out or "").splitlines() if l.startswith("# fused_bn_conv=1")), None)
    rows = parse_table(out, "resnet50")
    if not rows:
        return None, None, None
    r = rows[0]
    blocked = host = None
    for k in r:
        if "blocked" in k:
            blocked = float(r[k].rstrip("%"))
    if r.get("host_ms", "n/a") != "n/a":
        host = (float(r["host_ms"]), float(r["ms/step"]))
    return float(r["images/s"]), blocked, host


def torch_resnet50(num_classes):
    try:
        import torchvision
        return torchvision.models.resnet50(num_classes=num_classes), "torchvision resnet50"
    except ImportError:
        pass
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers), "ResNet-50 defined in bench_gpu.py (no torchvision)"


def torch_step(batch, precision="fp32", quiet=False, compile=False):
    """PyTorch's ResNet-50 training step on one synthetic batch (the one both bench_gpu.py and
    profile_gpu.py time): returns step(), which runs forward + cross-entropy + backward + SGD.
    compile: the model wrapped in torch.compile (default mode, inductor), as its users speed it up."""
    import torch
    import torch.nn as nn
    amp_dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True         # convolutions: PyTorch's default
    torch.backends.cuda.matmul.allow_tf32 = False  # matmul: PyTorch's default
    torch.manual_seed(0)
    model, what = torch_resnet50(1000)
    if not quiet:
        print(f"  torch {torch.__version__}, {what}, channels_last, cudnn.benchmark on", flush=True)
    model = model.cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-5)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    loss_fn = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    if compile:
        model = torch.compile(model)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = loss_fn(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    return step


def torch_train(batch, steps, warmup, precision="fp32", compile=False):
    import torch
    step = torch_step(batch, precision, compile=compile)
    t0 = time.perf_counter()
    for _ in range(max(warmup, 3) if compile else warmup):  # compile: the first steps compile and recompile
        step()
    torch.cuda.synchronize()
    if compile:
        print(f"  torch.compile {precision}: warm-up (compilation) took {time.perf_counter() - t0:.0f} s", flush=True)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    rate = batch * steps / (time.perf_counter() - t)
    del step
    torch.cuda.empty_cache()
    return rate


def fmt(v, f="{:.1f}", missing="failed"):
    return missing if v is None else f.format(v)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kiln", nargs="?", default=os.environ.get("KILN", "kiln-gpu/bin/kiln"))
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--amp-batch", type=int, default=256)
    p.add_argument("--skip-amp", action="store_true", help="skip part (c)")
    p.add_argument("--skip-matmul", action="store_true", help="skip part (a) (gpu_check.sh's tests part times matmul)")
    p.add_argument("--summary", help="also write one line per figure to this file")
    p.add_argument("--skip-graph", action="store_true", help="no cuda_graph=on run beside each kiln figure")
    p.add_argument("--fused", default="fp16,bf16", metavar="PRECISIONS",
                   help="also time kiln with fused_bn_conv=1 (and cuda_graph=on unless --skip-graph) in these "
                        "precisions ('' for none)")
    p.add_argument("--compile", default="fp16,bf16", metavar="PRECISIONS",
                   help="also time torch.compile'd PyTorch in these precisions ('' for none; each compiles for ~1 min)")
    p.add_argument("--kiln-ab", metavar="NAME=VALUE", action="append", default=[],
                   help="also time each kiln ResNet-50 run with this variable set (repeatable)")
    a = p.parse_args()
    for ab in a.kiln_ab:
        if "=" not in ab:
            p.error(f"--kiln-ab {ab}: give NAME=VALUE, e.g. KILN_CUDNN_BATCH_NORM=0")
    try:
        import torch
        have_torch = torch.cuda.is_available()
        if have_torch:
            print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}, CUDA {torch.version.cuda}, "
                  f"cuDNN {torch.backends.cudnn.version()}")
        else:
            print("torch is installed but sees no GPU: torch columns skipped")
    except Exception as e:  # noqa: BLE001 -- ImportError, or a library clash (OSError, RuntimeError)
        have_torch = False
        print(f"torch unusable in this python ({type(e).__name__}: {e}): torch columns skipped")
    summary = []

    def fig(line):
        print(line, flush=True)  # in the log at once: a kill of the whole check still leaves the figures
        summary.append(line)
        if a.summary:
            with open(a.summary, "w") as f:
                f.write("\n".join(summary) + "\n")

    ok = True
    if not a.skip_matmul:
        ok &= part_matmul(a, have_torch, fig)
    ok &= part_resnet50(a, have_torch, fig)
    sys.exit(0 if ok else 1)


def part_matmul(a, have_torch, fig):
    print(f"\n(a) matmul {a.n}^3, {a.iters} timed runs after 3 warm-up")
    km = kiln_matmul(a.kiln, a.n, a.iters, 3)
    tm = torch_matmul(a.n, a.iters, 3) if have_torch else {}
    print(f"{'dtype':6s} {'kiln TFLOPS':>12s} {'torch TFLOPS':>13s} {'kiln/torch':>11s}")
    ok = True
    for dt in ("bf16", "fp32"):
        k, t = km.get(dt), tm.get(dt)
        ok &= k is not None
        ratio = f"{k / t:.2f}" if k and t else "-"
        print(f"{dt:6s} {fmt(k, '{:12.1f}'):>12s} {fmt(t, '{:13.1f}'):>13s} {ratio:>11s}", flush=True)
        fig(f"matmul {a.n}^3 {dt}: kiln {fmt(k)} TFLOPS, torch {fmt(t)} TFLOPS, kiln/torch {ratio}")
    return ok


def part_resnet50(a, have_torch, fig):
    """(b) fp32 at --batch, (c) fp16 and bf16 at --amp-batch: kiln and torch alternate, one row each."""
    runs = [("fp32", a.batch)] + ([] if a.skip_amp else [("fp16", a.amp_batch), ("bf16", a.amp_batch)])
    print(f"\n(b, c) ResNet-50 training, 224x224, {a.steps} timed steps after {a.warmup}; fp32 with TF32 "
          f"convolutions; torch fp16/bf16: autocast + channels_last, GradScaler for fp16")
    rows, ok = [], True
    for prec, batch in runs:
        k, blocked, host = kiln_train(a.kiln, batch, a.steps, a.warmup, prec)
        kg = None
        if not a.skip_graph:
            kg, gblocked, ghost = kiln_train(a.kiln, batch, a.steps, a.warmup, prec, graph="on")
            ok &= kg is not None
            gain = f"{kg / k:.2f}" if k and kg else "-"
            fig(f"resnet50 {prec} batch {batch}: kiln cuda_graph=off {fmt(k)} img/s, cuda_graph=on {fmt(kg)} img/s "
                f"(on/off {gain}), host blocked {fmt(gblocked, '{:.2f}%', 'n/a')}" +
                (f", host issues a step in {ghost[0]:.2f} of its {ghost[1]:.2f} ms" if ghost else ""))
        kf = None
        if prec in a.fused.split(","):
            fgraph = "off" if a.skip_graph else "on"
            kf, fblocked, _ = kiln_train(a.kiln, batch, a.steps, a.warmup, prec, graph=fgraph, fused=True,
                                         timeout=180)  # + cuDNN's per-shape build and timing of the fused graphs
            ok &= kf is not None
            base = kg if kg else k
            fig(f"resnet50 {prec} batch {batch}: kiln fused_bn_conv=1 cuda_graph={fgraph} {fmt(kf)} img/s "
                f"(against fused_bn_conv=0 with the same graph setting: "
                f"{f'{kf / base:.2f}' if kf and base else '-'}), host blocked {fmt(fblocked, '{:.2f}%', 'n/a')}" +
                (f"; {last_fusion_line.split('; ', 1)[-1]}" if last_fusion_line else ""))
        for ab in a.kiln_ab:
            name, value = ab.split("=", 1)
            kb, _, _ = kiln_train(a.kiln, batch, a.steps, a.warmup, prec, env={name: value})
            ok &= kb is not None  # the A/B runs take the other code paths: their failure is a failure
            gain = f"{k / kb:.2f}" if k and kb else "-"
            fig(f"resnet50 {prec} batch {batch}: kiln {fmt(k)} img/s, kiln with {ab} {fmt(kb)} img/s "
                f"(default/that {gain})")
        t = None
        if have_torch:
            try:
                t = torch_train(batch, a.steps, a.warmup, prec)
            except Exception as e:  # noqa: BLE001 -- the kiln figure still counts
                print(f"  torch {prec} failed: {e}")
        tc = None
        if have_torch and prec in a.compile.split(","):
            try:
                tc = torch_train(batch, a.steps, a.warmup, prec, compile=True)
            except Exception as e:  # noqa: BLE001 -- the kiln figure still counts
                print(f"  torch.compile {prec} failed: {type(e).__name__}: {str(e)[:300]}")
            best_k = max(x for x in (k, kg if not a.skip_graph else None, kf) if x) if k else None
            fig(f"resnet50 {prec} batch {batch}: torch.compile {fmt(tc)} img/s, torch eager {fmt(t)}; kiln best "
                f"{fmt(best_k)} img/s: kiln/compile {f'{best_k / tc:.2f}' if best_k and tc else '-'}, "
                f"kiln/eager {f'{best_k / t:.2f}' if best_k and t else '-'}")
        ok &= k is not None
        rows.append((prec, batch, k, t, blocked))
        ratio = f"{k / t:.2f}" if k and t else "-"
        torch_fig = fmt(t) if have_torch else "n/a (no torch with CUDA)"
        fig(f"resnet50 {prec} batch {batch}: kiln {fmt(k)} img/s, torch {torch_fig} img/s, kiln/torch {ratio}, "
            f"kiln host blocked {fmt(blocked, '{:.2f}%', 'n/a')} of the step" +
            (f", host issues a step in {host[0]:.2f} of its {host[1]:.2f} ms" if host else ""))
    print(f"{'model':10s} {'dtype':6s} {'batch':>6s} {'kiln img/s':>11s} {'torch img/s':>12s} {'kiln/torch':>11s} "
          f"{'blocked':>8s}")
    for prec, batch, k, t, blocked in rows:
        ratio = f"{k / t:.2f}" if k and t else "-"
        print(f"{'resnet50':10s} {prec:6s} {batch:6d} {fmt(k):>11s} {fmt(t):>12s} {ratio:>11s} "
              f"{fmt(blocked, '{:.2f}%', 'n/a'):>8s}", flush=True)
    return ok


if __name__ == "__main__":
    main()
