#!/usr/bin/env python3
"""ResNet-50 trained from a folder of JPEGs, kiln against PyTorch on the same folder and GPU (the
`e2e` part of tools/gpu_check.sh; docs/data.md, "Feeding a GPU from JPEG files").

The folder is `kiln data imagenet-like`'s (ImageNet's Kaggle layout, made by gpu_check.sh). For each
precision (fp16 and bf16 at --batch, fp32 at --fp32-batch), four runs of --warmup + --steps steps:
  kiln files      `kiln train configs/imagenet_resnet50.json` on the folder: RandomResizedCrop 224 +
                  flip + normalize, data.workers = --workers (uint8 batches to the GPU, normalized
                  there); one epoch cut at warmup + steps, then its evaluation on the val folder.
                  Figures from metrics.jsonl's step rows after the warm-up: images/s, data-wait share
                  (the trainer waiting for a batch), host-blocked share (the host waiting for the GPU).
  kiln synthetic  the same `kiln train` on data.source=synthetic 224x224 images (normalize only): the
                  ceiling, the same trainer with no decoding.
  torch files     PyTorch as its users run it: torchvision ImageFolder + DataLoader (num_workers =
                  --torch-workers, pin_memory, persistent workers), RandomResizedCrop(224) +
                  RandomHorizontalFlip + ToTensor + Normalize in the workers, torchvision's resnet50 in
                  channels_last, SGD (momentum, weight decay), autocast fp16 (GradScaler) / bf16, TF32
                  for fp32, cudnn.benchmark. Data wait: the time in next(loader).
  torch synthetic one random batch on the GPU, reused: PyTorch's ceiling.
Each PyTorch run is its own process (its workers and GPU memory end with it). --device cpu is the dry
run (a small folder, a few steps, no GPU): the same code paths, figures meaningless.

Usage: e2e_gpu.py KILN --folder DIR --configs DIR [--device cuda|cpu] [--precisions fp16,bf16,fp32]
                  [--batch 256] [--fp32-batch 128] [--warmup 10] [--steps 50] [--log-every 10]
                  [--workers N] [--torch-workers N] [--runs DIR] [--summary FILE] [--timeout 120]
                  [--skip-torch] [--model resnet50]
Prints a table and one line per precision to --summary; exits non-zero when a kiln run fails (the
PyTorch side is skipped, saying why, where torch or torchvision is missing).
"""
import argparse
import json
import os
import subprocess
import sys
import time

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# --- kiln -------------------------------------------------------------------------------------------

def step_rows(path, after):
    rows = []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "step" and r.get("step", 0) > after and r.get("images_per_s"):
                rows.append(r)
    return rows


def summarize_rows(rows, batch, log_every):
    """images/s over the rows' intervals (equal step counts: images / summed seconds), and the
    time-weighted data-wait and host-blocked shares."""
    if not rows:
        return None
    images = batch * log_every
    secs = [images / r["images_per_s"] for r in rows]
    total = sum(secs)

    def share(key):
        vals = [(r.get(key), s) for r, s in zip(rows, secs) if r.get(key) is not None]
        return sum(v * s for v, s in vals) / sum(s for _, s in vals) if vals else None

    return {"images_per_s": images * len(rows) / total, "data_wait": share("data_wait_share"),
            "host_blocked": share("host_blocked_share"), "rows": len(rows)}


def kiln_run(a, label, config, overrides, batch):
    runs = os.path.join(a.runs, "kiln")
    name = f"e2e_{label}"
    cmd = [a.kiln, "train", config, f"device={'0' if a.device == 'cuda' else 'cpu'}", "epochs=1",
           f"train.max_steps_per_epoch={a.warmup + a.steps}", f"train.log_every={a.log_every}",
           f"data.batch_size={batch}", f"data.workers={a.workers}", f"train.runs_dir={runs}", f"name={name}",
           "train.plots=false", "train.tensorboard=false", "train.save_every_steps=0", f"model.name={a.model}"] + overrides
    print("$ " + " ".join(cmd), flush=True)
    log = os.path.join(a.runs, f"kiln_{label}.log")
    t0 = time.time()
    try:
        with open(log, "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=a.timeout).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    wall = time.time() - t0
    lines = open(log, errors="replace").read().splitlines()
    for line in lines:
        if line.startswith(("kiln:", "val ", "error", "warning")) or "error" in line:
            print("  " + line)
    if rc != 0:
        print(f"kiln {label}: exit {rc} after {wall:.0f} s; last lines:")
        for line in lines[-15:]:
            print("  | " + line)
        return None
    res = summarize_rows(step_rows(os.path.join(runs, name, "metrics.jsonl"), a.warmup), batch, a.log_every)
    if res is None:
        print(f"kiln {label}: no step rows after step {a.warmup} in {runs}/{name}/metrics.jsonl")
        return None
    res["wall"] = wall
    print(f"kiln {label}: {res['images_per_s']:.0f} img/s, data wait {fmt_share(res['data_wait'])}, "
          f"host blocked {fmt_share(res['host_blocked'])} ({res['rows']} intervals of {a.log_every} steps), "
          f"{wall:.0f} s", flush=True)
    return res


def kiln_files(a, prec, batch):
    root = a.folder
    config = os.path.join(a.configs, "imagenet_resnet50.json")
    return kiln_run(a, f"files_{prec}", config,
                    [f"precision={prec}", f"data.root={root}/ILSVRC/Data/CLS-LOC",
                     f"data.val_labels={root}/LOC_val_solution.csv",
                     f"data.class_names_file={root}/LOC_synset_mapping.txt"], batch)


def kiln_synthetic(a, prec, batch):
    norm = {"type": "normalize", "mean": MEAN, "std": STD}
    cfg = {"name": "e2e_synthetic", "model": {"name": a.model, "num_classes": 1000},
           "data": {"source": "synthetic",
                    "synthetic": {"size": (a.warmup + a.steps + 1) * batch, "height": 224, "width": 224,
                                  "channels": 3, "num_classes": 1000},
                    "holdout": batch, "train_transforms": [norm], "val_transforms": [norm]},
           "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
           "train": {"epochs": 1}}
    path = os.path.join(a.runs, "synthetic_resnet50.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return kiln_run(a, f"synthetic_{prec}", path, [f"precision={prec}"], batch)


# --- PyTorch ----------------------------------------------------------------------------------------

def torch_one(a):
    """One PyTorch run in this process; prints RESULT {json}."""
    import torch
    import torchvision
    from torchvision import datasets, transforms
    if os.environ.get("E2E_TORCH_SHARING"):  # the retry after a worker died of a small /dev/shm
        torch.multiprocessing.set_sharing_strategy(os.environ["E2E_TORCH_SHARING"])
    dev = torch.device("cuda:0" if a.device == "cuda" else "cpu")
    torch.backends.cudnn.benchmark = True
    if a.precision == "fp32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.model)(num_classes=1000).to(dev, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)
    use_scaler = a.precision == "fp16" and dev.type == "cuda"
    scaler = (torch.amp.GradScaler("cuda") if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")
              else torch.cuda.amp.GradScaler()) if use_scaler else None
    loss_fn = torch.nn.CrossEntropyLoss()
    batch = a.batch
    if a.synthetic:
        x0 = torch.randn(batch, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        y0 = torch.randint(0, 1000, (batch,), device=dev)
        def batches():
            while True:
                yield x0, y0
        it = batches()
        workers = 0
    else:
        tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                                 transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
        ds = datasets.ImageFolder(os.path.join(a.folder, "ILSVRC/Data/CLS-LOC/train"), tf)
        workers = a.torch_workers
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                             pin_memory=dev.type == "cuda", persistent_workers=workers > 0,
                                             drop_last=True)
        it = iter(loader)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    wait = 0.0
    t_start = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            sync()
            wait = 0.0
            t_start = time.perf_counter()
        t0 = time.perf_counter()
        x, y = next(it)
        wait += time.perf_counter() - t0
        x = x.to(dev, non_blocking=True).contiguous(memory_format=torch.channels_last)
        y = y.to(dev, non_blocking=True)
        if amp_dtype is not None:
            with torch.autocast(device_type=dev.type, dtype=amp_dtype):
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
    sync()
    elapsed = time.perf_counter() - t_start
    print("RESULT " + json.dumps({"images_per_s": a.steps * batch / elapsed, "data_wait": wait / elapsed,
                                  "workers": workers, "torch": torch.__version__,
                                  "torchvision": torchvision.__version__}), flush=True)


def torch_run(a, prec, batch, synthetic):
    label = f"torch {'synthetic' if synthetic else 'files'} {prec}"
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-one", "--device", a.device, "--precision", prec,
           "--batch", str(batch), "--warmup", str(a.warmup), "--steps", str(a.steps), "--folder", a.folder,
           "--torch-workers", str(a.torch_workers), "--model", a.model] + (["--synthetic"] if synthetic else [])
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.time()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        text = out.stdout + out.stderr
        if out.returncode != 0 and not synthetic and ("shared memory" in text or "Bus error" in text
                                                       or "DataLoader worker" in text):
            # A container's small /dev/shm kills DataLoader workers: once more with the file_system
            # sharing strategy (said in the log and the result).
            print(f"{label}: DataLoader workers failed ({text.strip().splitlines()[-1][:200]}); "
                  "again with torch.multiprocessing's file_system sharing strategy", flush=True)
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout,
                                 env={**os.environ, "E2E_TORCH_SHARING": "file_system"})
    except subprocess.TimeoutExpired:
        print(f"{label}: timed out after {a.timeout} s")
        return None
    res = None
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if out.returncode != 0 or res is None:
        print(f"{label}: exit {out.returncode}; last lines:")
        for line in (out.stdout + out.stderr).splitlines()[-15:]:
            print("  | " + line)
        return None
    res["wall"] = time.time() - t0
    print(f"{label}: {res['images_per_s']:.0f} img/s, data wait {fmt_share(res['data_wait'])}, "
          f"{res['workers']} workers, {res['wall']:.0f} s (torch {res['torch']})", flush=True)
    return res


def torch_missing():
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        return f"{type(e).__name__}: {e}"
    return None


# --- the table ---------------------------------------------------------------------------------------

def fmt_share(v):
    return "n/a" if v is None else f"{100 * v:.1f}%"


def fmt_ips(r):
    if r is None:
        return "failed"
    v = r["images_per_s"]
    return f"{v:.0f}" if v >= 10 else f"{v:.2f}"


def ratio(a, b):
    if a is None or b is None or not b["images_per_s"]:
        return None
    return a["images_per_s"] / b["images_per_s"]


def fmt_ratio(v):
    return "n/a" if v is None else f"{v:.2f}x"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kiln", nargs="?", default=os.environ.get("KILN"))
    p.add_argument("--folder", required=True)
    p.add_argument("--configs")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--precisions", default="fp16,bf16,fp32")
    p.add_argument("--precision", default="fp32")  # --torch-one's
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--fp32-batch", type=int, default=128)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--workers", type=int, default=max(1, cores() - 1))
    p.add_argument("--torch-workers", type=int, default=cores())
    p.add_argument("--runs", default="/tmp/kiln-e2e-runs")
    p.add_argument("--model", default="resnet50", help="kiln's model.name and torchvision.models' name (the dry run's is smaller)")
    p.add_argument("--summary")
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--synthetic", action="store_true")  # --torch-one's
    p.add_argument("--torch-one", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.torch_one:
        torch_one(a)
        return 0
    if not a.kiln or not a.configs:
        p.error("KILN (or $KILN) and --configs are required")
    if a.warmup % a.log_every or a.steps % a.log_every:
        p.error("--warmup and --steps must be multiples of --log-every (the step rows' interval)")
    os.makedirs(a.runs, exist_ok=True)
    missing = None if not a.skip_torch else "--skip-torch"
    if missing is None:
        missing = torch_missing()
    if missing:
        print(f"PyTorch side skipped: {missing}")
    n_cores = cores()
    print(f"e2e: ResNet-50 224x224 from {a.folder}, {a.warmup} warm-up + {a.steps} timed steps, {a.device}, "
          f"{n_cores} cores: kiln data.workers={a.workers}, torch num_workers={a.torch_workers}", flush=True)
    results = {}
    failed = 0
    for prec in [s for s in a.precisions.split(",") if s]:
        batch = a.fp32_batch if prec == "fp32" else a.batch
        r = {"batch": batch}
        r["kf"] = kiln_files(a, prec, batch)
        r["ks"] = kiln_synthetic(a, prec, batch)
        failed += (r["kf"] is None) + (r["ks"] is None)
        r["tf"] = r["ts"] = None
        if not missing:
            r["tf"] = torch_run(a, prec, batch, False)
            r["ts"] = torch_run(a, prec, batch, True)
        results[prec] = r

    head = (f"{'':5} {'batch':>5} | {'kiln files':>10} {'synth':>7} {'f/s':>6} {'wait':>6} {'blocked':>7} | "
            f"{'torch files':>11} {'synth':>7} {'f/s':>6} {'wait':>6} | {'kiln/torch files':>16}")
    lines = [f"e2e {a.model} images/s from JPEG files and synthetic batches ({a.device}, {n_cores} cores; "
             f"kiln {a.workers} loader threads, torch {a.torch_workers} workers; {a.steps} steps after {a.warmup})",
             head, "-" * len(head)]
    summary = []
    for prec, r in results.items():
        kf, ks, tf, ts = r["kf"], r["ks"], r["tf"], r["ts"]
        kt = ratio(kf, tf)
        lines.append(f"{prec:5} {r['batch']:>5} | {fmt_ips(kf):>10} {fmt_ips(ks):>7} {fmt_ratio(ratio(kf, ks)):>6} "
                     f"{fmt_share(kf and kf['data_wait']):>6} {fmt_share(kf and kf['host_blocked']):>7} | "
                     f"{'skipped' if missing else fmt_ips(tf):>11} {'' if missing else fmt_ips(ts):>7} "
                     f"{'' if missing else fmt_ratio(ratio(tf, ts)):>6} "
                     f"{'' if missing else fmt_share(tf and tf['data_wait']):>6} | {fmt_ratio(kt):>16}")
        summary.append(f"e2e {prec} batch {r['batch']}: kiln files {fmt_ips(kf)} img/s (data wait "
                       f"{fmt_share(kf and kf['data_wait'])}, host blocked {fmt_share(kf and kf['host_blocked'])}), "
                       f"synthetic {fmt_ips(ks)} (files/synthetic {fmt_ratio(ratio(kf, ks))}); torch "
                       + (f"skipped ({missing})" if missing else
                          f"files {fmt_ips(tf)} (data wait {fmt_share(tf and tf['data_wait'])}), synthetic "
                          f"{fmt_ips(ts)}; kiln/torch from files {fmt_ratio(kt)}"))
    goals = []
    if a.device == "cuda":
        for prec in ("fp16", "bf16"):
            r = results.get(prec)
            if not r:
                continue
            kt, ks = ratio(r["kf"], r["tf"]), ratio(r["kf"], r["ks"])
            wait = r["kf"] and r["kf"]["data_wait"]
            goals.append(f"goal {prec}: kiln files >= 1.5x torch files: "
                         f"{'n/a' if kt is None else ('met' if kt >= 1.5 else 'MISSED')} ({fmt_ratio(kt)}); "
                         f"kiln files within 5% of synthetic with data wait <= 5%: "
                         f"{'n/a' if ks is None or wait is None else ('met' if ks >= 0.95 and wait <= 0.05 else 'MISSED')}"
                         f" ({fmt_ratio(ks)}, wait {fmt_share(wait)})")
    print("\n" + "\n".join(lines + [""] + summary + goals))
    if a.summary:
        with open(a.summary, "a") as f:
            f.write("\n".join(lines + summary + goals) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
