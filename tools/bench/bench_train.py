#!/usr/bin/python3
"""Training throughput, kiln vs PyTorch on the CPU, side by side in one run.

For each network, trains the same model on the same synthetic images with SGD (momentum 0.9,
nesterov, weight decay) and cross-entropy, the same batch size and thread count, and prints
images/s of the training steps (warm-up steps excluded on both sides):

    model      precision  batch   kiln img/s   torch img/s   kiln/torch

  lenet        the default model of configs/fashion_mnist_cnn.json (28x28x1, 10 classes), batch 64, fp32
  resnet18     the CIFAR-style ResNet-18 (torchvision's resnet18 with a 3x3/1 stem and no maxpool;
               kiln: {"name": "resnet18", "stem": "cifar"}), 32x32x3, 10 classes, batch 128, fp32;
               channels_last in torch
  resnet18 bf16  the same network in bf16: kiln precision=bf16 against torch.autocast("cpu",
               torch.bfloat16) with channels_last (--bf16; slow where the CPU has no bf16 units)

kiln runs `kiln train` on a generated config with the synthetic source and reads the steady
images/s it prints for the second epoch (the first warms up). torch: Debian's python3-torch,
torch.set_num_threads(--threads), the same steps after `--warmup` steps.

The two sides run alternately, --rounds times each (default 3), and the table gives the median
images/s of each side and the median of the per-round ratios, with the lowest and highest ratio:
on a shared (virtual) machine the CPU's throughput drifts by 20-40% over minutes, so one pair of
runs can mislead either way.

--paired N (ResNet-18 rows only) runs the two sides in lockstep instead: `kiln bench train paced=1`
(the trainer's step on the same network and synthetic batch, without the data loader) and the torch
model stay alive side by side, and N times one kiln step and one torch step run back to back (the
order alternating; the idle side waits, blocked on a pipe). Each pair sees the same machine, so the
median of the N per-pair ratios (with its quartiles) is far steadier than whole runs minutes apart.

Usage: /usr/bin/python3 tools/bench/bench_train.py [build/tools/kiln] [--threads 2] [--steps 30] [--rounds 3] [--bf16]
       [--only lenet|resnet18] [--precision fp32|bf16] [--paired N]  (--precision bf16 implies --bf16;
       each round, or pair, is printed to stderr as it ends)
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def kiln_rate(kiln, model, shape, classes, batch, steps, threads, precision="fp32"):
    h, w, c = shape
    cfg = {
        "name": "bench",
        "model": dict(model, in_channels=c, num_classes=classes),
        "data": {"source": "synthetic",
                 "synthetic": {"size": batch * steps, "height": h, "width": w, "channels": c, "num_classes": classes},
                 "batch_size": batch, "workers": 1},
        "optim": {"name": "sgd", "lr": 0.01, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4},
        "train": {"epochs": 2, "plots": False, "eval_every": 100, "precision": precision},
    }
    with tempfile.TemporaryDirectory() as d:
        cfg["train"]["runs_dir"] = d
        path = os.path.join(d, "bench.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        out = subprocess.run([kiln, "train", path], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("kiln failed:\n" + out.stdout + out.stderr)
        with open(os.path.join(d, "bench", "metrics.csv")) as f:
            rows = [l.strip().split(",") for l in f]
        col = rows[0].index("images_per_s")
        return float(rows[-1][col])  # epoch 2: warm


def torch_rate(name, shape, classes, batch, steps, warmup, threads, precision="fp32"):
    step = torch_step(name, shape, classes, batch, threads, precision)
    for _ in range(warmup):
        step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return batch * steps / (time.perf_counter() - t)


def torch_step(name, shape, classes, batch, threads, precision="fp32"):
    """One training step of the torch model as a function (the model built once)."""
    import torch
    import torch.nn as nn
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    h, w, c = shape
    if name == "lenet":
        s = h // 4
        model = nn.Sequential(
            nn.Conv2d(c, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * s * s, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, classes))
        fmt = torch.contiguous_format
    else:
        import torchvision
        model = torchvision.models.resnet18(num_classes=classes)
        model.conv1 = nn.Conv2d(c, 64, 3, 1, 1, bias=False)  # the CIFAR stem
        model.maxpool = nn.Identity()
        fmt = torch.channels_last
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(batch, c, h, w).to(memory_format=fmt)
    y = torch.randint(0, classes, (batch,))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step


def paired(kiln, model, shape, classes, batch, steps, warmup, threads, precision):
    """kiln (`kiln bench train paced=1`, the trainer's step on the same network) and torch in
    lockstep: each pair is one kiln step and one torch step taken back to back, the order alternating,
    so both see the same machine. Returns the per-pair (kiln ms, torch ms)."""
    h, w, c = shape
    cmd = [kiln, "bench", "train", f"model={model['name']}", f"batch={batch}", f"size={h}", f"channels={c}",
           f"classes={classes}", f"steps={steps}", f"warmup={warmup}", f"precision={precision}", "device=cpu",
           "paced=1"]
    if "stem" in model:
        cmd.append(f"stem={model['stem']}")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "ready":
                break
        else:
            sys.exit("kiln bench train paced=1 ended before its warm-up was done: " + " ".join(cmd))
        step = torch_step(model["name"], shape, classes, batch, threads, precision)
        for _ in range(warmup):
            step()

        def kiln_ms():
            proc.stdin.write("\n")
            proc.stdin.flush()
            line = proc.stdout.readline().split()
            if len(line) != 2 or line[0] != "step_ms":
                sys.exit("kiln bench train paced=1 said %r, not 'step_ms T'" % " ".join(line))
            return float(line[1])

        def torch_ms():
            t = time.perf_counter()
            step()
            return (time.perf_counter() - t) * 1e3

        pairs = []
        for i in range(steps):
            if i % 2 == 0:
                k = kiln_ms()
                t = torch_ms()
            else:
                t = torch_ms()
                k = kiln_ms()
            pairs.append((k, t))
        return pairs
    finally:
        proc.stdin.close()
        proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kiln", nargs="?", default="build/tools/kiln")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3, help="alternating kiln/torch runs per case (median reported)")
    p.add_argument("--bf16", action="store_true", help="add the bf16 ResNet-18 row (torch autocast)")
    p.add_argument("--only", choices=["lenet", "resnet18"], help="run one network")
    p.add_argument("--precision", choices=["fp32", "bf16"], help="run only the rows of this precision")
    p.add_argument("--paired", type=int, metavar="N", default=0,
                   help="ResNet-18 only: N lockstep pairs of one kiln step and one torch step in two live "
                        "processes (kiln bench train paced=1), instead of whole runs per round")
    a = p.parse_args()
    r18 = {"name": "resnet18", "stem": "cifar"}
    # (name, kiln model, input HWC, classes, batch, timed steps, torch warm-up steps, precision)
    cases = [
        ("lenet", {"name": "lenet", "dropout": 0.5}, (28, 28, 1), 10, 64, a.steps, a.warmup, "fp32"),
        ("resnet18", r18, (32, 32, 3), 10, 128, max(5, a.steps // 6), 1, "fp32"),
    ]
    if a.bf16 or a.precision == "bf16":
        cases.append(("resnet18", r18, (32, 32, 3), 10, 128, max(5, a.steps // 6), 1, "bf16"))
    if a.only:
        cases = [c for c in cases if c[0] == a.only]
    if a.precision:
        cases = [c for c in cases if c[7] == a.precision]
    if a.paired:
        cases = [c for c in cases if c[0] == "resnet18"]
        print(f"threads {a.threads}, {a.paired} lockstep pairs of one kiln and one torch step per case "
              f"(medians; the ratio's quartiles in brackets)")
        print(f"{'model':10s} {'precision':>9s} {'batch':>6s} {'kiln img/s':>12s} {'torch img/s':>12s} "
              f"{'kiln/torch':>11s}  {'quartiles':>13s}")
        for name, model, shape, classes, batch, steps, warmup, prec in cases:
            pairs = paired(a.kiln, model, shape, classes, batch, a.paired, 3, a.threads, prec)
            for i, (k, t) in enumerate(pairs):
                print(f"  pair {i + 1}: {name} {prec} kiln {k:.1f} torch {t:.1f} ms ({t / k:.2f}x)", file=sys.stderr,
                      flush=True)
            ratios = sorted(t / k for k, t in pairs)
            q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
            print(f"{name:10s} {prec:>9s} {batch:6d} {batch * 1e3 / statistics.median(k for k, _ in pairs):12.1f} "
                  f"{batch * 1e3 / statistics.median(t for _, t in pairs):12.1f} {q[1]:11.2f}  "
                  f"[{q[0]:.2f}, {q[2]:.2f}]", flush=True)
        return
    print(f"threads {a.threads}, {a.rounds} alternating rounds per case (medians; ratio range in brackets)")
    print(f"{'model':10s} {'precision':>9s} {'batch':>6s} {'kiln img/s':>12s} {'torch img/s':>12s} {'kiln/torch':>11s}"
          f"  {'range':>13s}")
    for name, model, shape, classes, batch, steps, warmup, prec in cases:
        ks, ts = [], []
        for _ in range(max(1, a.rounds)):
            ks.append(kiln_rate(a.kiln, model, shape, classes, batch, steps, a.threads, prec))
            ts.append(torch_rate(name, shape, classes, batch, steps, warmup, a.threads, prec))
            print(f"  round {len(ks)}: {name} {prec} kiln {ks[-1]:.1f} torch {ts[-1]:.1f} img/s "
                  f"({ks[-1] / ts[-1]:.2f}x)", file=sys.stderr, flush=True)
        ratios = [k / t for k, t in zip(ks, ts)]
        print(f"{name:10s} {prec:>9s} {batch:6d} {statistics.median(ks):12.1f} {statistics.median(ts):12.1f} "
              f"{statistics.median(ratios):11.2f}  [{min(ratios):.2f}, {max(ratios):.2f}]", flush=True)

if __name__ == "__main__":
    main()
