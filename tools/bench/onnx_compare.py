#!/usr/bin/env python3
"""kiln's ONNX export against onnxruntime, for every registry model.

For each model (and a custom "layers" model that uses the layers no registry model does), writes a
config with a synthetic data source of a small input size, runs

    kiln export CONFIG init=random out=M.onnx reference=M.ref.safetensors

(a seed-initialised model; the reference holds a fixed random input batch of 4 in NCHW and kiln's
fp32 CPU logits for it), runs the .onnx in onnxruntime (CPUExecutionProvider) on the same input,
and prints one table:

    model  input  max|kiln|  max|diff|  diff/max(1,|kiln|)  tol  pass  same top-1  MiB  export s  ort s

Tolerance: max|diff| <= 1e-4 * max(1, max|kiln logits|), i.e. 1e-4 absolute for logits up to 1
and 1e-4 relative to the largest logit beyond (seed-initialised deep ResNets, whose batch norms
still hold mean 0 / var 1, give logits in the hundreds). "export s" is the wall time of the whole
`kiln export` (building the model, one forward to check the size, writing the ONNX file, the
reference forward); "ort s" is onnxruntime's session creation plus one run of the batch.

Sizes: 32x32 for the CIFAR models and VGG (whose adaptive pooling then replicates 1x1 features to
7x7), 28x28 for LeNet, 64x64 for AlexNet and the ImageNet ResNets (their stems downsample by 4),
224x224 only for the photo run. --photos also exports resnet18 at 224 with resize(256) +
center_crop(224) and ImageNet's mean/std and compares on the skimage photos (images=).

--run RUN also exports a trained run folder (its best checkpoint, else its last) and compares on --run-images
(e.g. a `kiln data export` of its validation split) or the seeded random batch.

Usage: build-venv/bin/python tools/bench/onnx_compare.py [--kiln build/tools/kiln] [--models a,b]
       [--photos DIR] [--keep DIR] [--run RUN [--run-images DIR]]   (tools/make_venv.sh makes build-venv/ with onnxruntime)
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort


def load_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(data[s:e], dtype=np.float32).reshape(v["shape"])
    return out


# name -> (model config, channels, side)
def cases():
    c = []
    c.append(("lenet", {"name": "lenet"}, 1, 28))
    c.append(("alexnet", {"name": "alexnet", "num_classes": 10}, 3, 64))
    c.append(("alexnet(lrn)", {"name": "alexnet", "num_classes": 10, "lrn": True}, 3, 64))
    for v in ["vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn"]:
        c.append((v, {"name": v, "num_classes": 10}, 3, 32))
    for r in ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]:
        c.append((r, {"name": r, "num_classes": 10}, 3, 64))
    c.append(("resnet18(stem cifar)", {"name": "resnet18", "num_classes": 10, "stem": "cifar"}, 3, 32))
    for r in ["resnet20", "resnet32", "resnet44", "resnet56", "resnet110"]:
        c.append((r, {"name": r}, 3, 32))
    c.append(("resnet_cifar(d14 B)", {"name": "resnet_cifar", "depth": 14, "shortcut": "B", "width": 8}, 3, 32))
    # A layer list with what no registry model uses: avg pooling (ceil mode, no padding counted),
    # max pooling in ceil mode, an odd adaptive pool, batch_norm1d, a nested sequential, blocks.
    c.append(("custom(layers)", {"layers": [
        {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1},
        {"type": "batch_norm2d", "num_features": 8},
        {"type": "relu"},
        {"type": "max_pool2d", "kernel_size": 3, "stride": 2, "ceil_mode": True},
        {"type": "basic_block", "in_channels": 8, "planes": 16, "stride": 2, "shortcut": "A"},
        {"type": "bottleneck", "in_channels": 16, "planes": 4, "stride": 1},
        {"type": "local_response_norm", "size": 3},
        {"type": "avg_pool2d", "kernel_size": 2, "stride": 2, "ceil_mode": True,
         "count_include_pad": False},
        {"type": "sequential", "layers": [{"type": "conv2d", "in_channels": 16, "out_channels": 12,
                                           "kernel_size": 1, "groups": 4}]},
        {"type": "adaptive_avg_pool2d", "output_size": 3},
        {"type": "flatten"},
        {"type": "dropout", "p": 0.3},
        {"type": "linear", "in_features": 108, "out_features": 20},
        {"type": "batch_norm1d", "num_features": 20},
        {"type": "relu"},
        {"type": "linear", "in_features": 20, "out_features": 10}]}, 3, 34))
    return c


def config_for(model, channels, side, val_transforms=None):
    mean = [0.485, 0.456, 0.406][:channels] if channels == 3 else [0.286]
    std = [0.229, 0.224, 0.225][:channels] if channels == 3 else [0.353]
    vt = val_transforms or []
    return {"model": model,
            "data": {"source": "synthetic",
                     "synthetic": {"size": 8, "height": side, "width": side, "channels": channels,
                                   "num_classes": 10},
                     "val_transforms": vt + [{"type": "normalize", "mean": mean, "std": std}]},
            "train": {"seed": 7}}


def run_case(kiln, work, name, config, extra_args=(), run_dir=None):
    """Exports `config` (init=random), or the trained run folder `run_dir`, and compares."""
    safe = "".join(ch if ch.isalnum() else "_" for ch in name)
    cfg = os.path.join(work, safe + ".json")
    onnx_path = os.path.join(work, safe + ".onnx")
    ref = os.path.join(work, safe + ".ref.safetensors")
    if run_dir:
        source = [run_dir]
    else:
        with open(cfg, "w") as f:
            json.dump(config, f)
        source = [cfg, "init=random"]
    t0 = time.perf_counter()
    p = subprocess.run([kiln, "export", *source, "format=onnx", "out=" + onnx_path, "reference=" + ref,
                        *extra_args], capture_output=True, text=True)
    t_export = time.perf_counter() - t0
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1]}
    r = load_safetensors(ref)
    t0 = time.perf_counter()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    y = sess.run(["logits"], {"input": r["input"]})[0]
    t_ort = time.perf_counter() - t0
    kiln_logits = r["logits"]
    diff = float(np.abs(y - kiln_logits).max())
    scale = float(np.abs(kiln_logits).max())
    tol = 1e-4 * max(1.0, scale)
    same_top1 = bool((y.argmax(1) == kiln_logits.argmax(1)).all())
    return {"input": "x".join(str(d) for d in r["input"].shape[1:]), "batch": r["input"].shape[0], "scale": scale,
            "diff": diff, "tol": tol, "pass": diff <= tol, "top1": same_top1, "export_s": t_export, "ort_s": t_ort,
            "mib": os.path.getsize(onnx_path) / 2**20,
            "files": tuple(f for f in (cfg, onnx_path, ref) if os.path.exists(f))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/tools/kiln")
    ap.add_argument("--models", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--photos", default="/usr/lib/python3/dist-packages/skimage/data",
                    help="folder of photos for the 224x224 run ('' to skip)")
    ap.add_argument("--keep", default="", help="keep the configs, .onnx and references in this folder")
    ap.add_argument("--run", default="", help="also compare this trained run folder (its best checkpoint, else its last)")
    ap.add_argument("--run-images", default="", help="images for --run (a folder or files, comma-separated; "
                                                     "default: the seeded random batch)")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="kiln_onnx_")
    os.makedirs(work, exist_ok=True)
    wanted = set(filter(None, args.models.split(",")))
    rows = []
    for name, model, ch, side in cases():
        if wanted and name not in wanted:
            continue
        rows.append((name, run_case(args.kiln, work, name, config_for(model, ch, side))))
        print_row(*rows[-1], file=sys.stderr)
        if not args.keep and "files" in rows[-1][1]:
            for f in rows[-1][1]["files"]:
                os.remove(f)
    if args.photos and (not wanted or "photos" in wanted):
        photos = sorted(os.path.join(args.photos, f) for f in os.listdir(args.photos)
                        if f in ("astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "rocket.jpg",
                                 "motorcycle_left.png"))
        cfg = config_for({"name": "resnet18", "num_classes": 1000}, 3, 224,
                         [{"type": "resize", "size": 256}, {"type": "center_crop", "size": 224}])
        rows.append(("resnet18 photos", run_case(args.kiln, work, "resnet18_photos", cfg,
                                                 ["images=" + ",".join(photos)])))
        print_row(*rows[-1], file=sys.stderr)
    if args.run:
        extra = ["images=" + args.run_images] if args.run_images else []
        rows.append(("run " + os.path.basename(os.path.normpath(args.run)),
                     run_case(args.kiln, work, "run", None, extra, run_dir=args.run)))
        print_row(*rows[-1], file=sys.stderr)
    print()
    print("| model | input (batch) | max abs kiln logit | max abs diff | diff / max(1, logit) | tolerance | pass | same top-1 | MiB | export s | ort s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        print_row(name, r)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    failed = [n for n, r in rows if not r.get("pass")]
    print(f"\n{len(rows) - len(failed)}/{len(rows)} pass (max|diff| <= 1e-4 * max(1, max|kiln logit|))"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def print_row(name, r, file=sys.stdout):
    if "error" in r:
        print(f"| {name} | error: {r['error']} ||||||||||", file=file)
        return
    print(f"| {name} | {r['input']} ({r['batch']}) | {r['scale']:.3g} | {r['diff']:.2e} | {r['diff'] / max(1.0, r['scale']):.1e} | {r['tol']:.1e} | "
          f"{'yes' if r['pass'] else 'NO'} | {'yes' if r['top1'] else 'no'} | {r['mib']:.1f} | {r['export_s']:.1f} | "
          f"{r['ort_s']:.2f} |", file=file, flush=True)


if __name__ == "__main__":
    sys.exit(main())
